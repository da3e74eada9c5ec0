#!/usr/bin/env bash
# test_compare.sh: `attnlab compare` (seed 004: poly vs softmax side by side)
# for language and vision models, and `attnlab attnmap --image` (the CLS row
# over the patch grid). Panels are titled by the score function; the NPY
# holds the full weight matrices; model/input mismatches are one-line errors.
. "$(dirname "$0")/lib.sh" "$@"

make_text "$WORK/text.txt" 300
head -c 100 "$WORK/text.txt" >"$WORK/short.txt"
LM="--layers 2 --hidden 32 --heads 4 --context 32 --batch 2 --steps 3 --eval-tokens 64 --data $WORK/text.txt --quiet"
# a small copy of Fashion-MNIST (first 300 training, 100 test images) keeps the final evaluation short
IMG=$WORK/fmnist
VIT="--task vision --images $IMG --layers 1 --hidden 32 --heads 2 --steps 3 --batch 8 --eval-images 64 --quiet"
FM=/usr/share/datasets/fashion-mnist
if [ -e $FM/t10k-images-idx3-ubyte.gz ]; then
    mkdir -p "$IMG"
    "$PY" - "$FM" "$IMG" <<'PYEOF'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for split, n in (("train", 300), ("t10k", 100)):
    for kind, dims in (("images-idx3", 3), ("labels-idx1", 1)):
        name = "%s-%s-ubyte.gz" % (split, kind)
        b = gzip.open("%s/%s" % (src, name)).read()
        shape = struct.unpack(">" + "I" * dims, b[4:4 + 4 * dims])
        per = 1
        for s in shape[1:]:
            per *= s
        head = b[:4] + struct.pack(">I", n) + b[8:4 + 4 * dims]
        with gzip.open("%s/%s" % (dst, name), "wb") as f:
            f.write(head + b[4 + 4 * dims:4 + 4 * dims + n * per])
PYEOF
fi

begin "train language models: softmax and poly"
run train --precision f32 $LM --out "$WORK/lm_soft"
check_ok
run train --precision f32 $LM --score poly --poly-power 3 --poly-scale 0.25 --out "$WORK/lm_poly"
check_ok
end

begin "compare, language models: titles from the score functions, [2, T, T]"
run compare --model "$WORK/lm_poly" --model "$WORK/lm_soft" --text "$WORK/short.txt" --out "$WORK/lm.png"
check_ok
check_py "compare outputs" '
import json, sys
import numpy as np
P = np.load(sys.argv[1] + ".npy")
assert P.shape == (2, 100, 100), P.shape
assert np.all(np.triu(P, 1) == 0)
assert np.allclose(P[1].sum(-1), 1, atol=1e-4), "softmax rows sum to 1"
j = json.load(open(sys.argv[1] + ".json"))
assert [p["title"] for p in j["panels"]] == ["Attention with (1/4)x^3", "Attention with softmax"], j["panels"]
assert open(sys.argv[1] + ".png", "rb").read(4) == b"\x89PNG"
' "$WORK/lm"
end

if [ -e "$IMG/t10k-images-idx3-ubyte.gz" ]; then
    begin "train vision models: softmax and poly (1/14) x^3"
    run train --precision f32 $VIT --out "$WORK/vit_soft"
    check_ok
    run train --precision f32 $VIT --score poly --out "$WORK/vit_poly"
    check_ok
    end

    begin "compare, vision: the CLS rows, seed 004's titles"
    run compare --model "$WORK/vit_poly" --model "$WORK/vit_soft" --image 0 --images "$IMG" --overlay --out "$WORK/vit.png"
    check_ok
    check_py "vision compare" '
import json, sys
import numpy as np
P = np.load(sys.argv[1] + ".npy")
assert P.shape == (2, 197, 197), P.shape
assert np.allclose(P[1].sum(-1), 1, atol=1e-4), "bidirectional softmax rows sum to 1"
assert (P[1] > 0).all(), "vision attention is not masked"
j = json.load(open(sys.argv[1] + ".json"))
assert [p["title"] for p in j["panels"]] == ["Attention with (1/14)x^3", "Attention with softmax"], j["panels"]
assert j["image"] == 0
' "$WORK/vit"
    end

    begin "attnmap --image: the CLS row over the patch grid"
    run attnmap --model "$WORK/vit_soft" --image 5 --images "$IMG" --layer 0 --head 0,1 --out "$WORK/vmap.png"
    check_ok
    check_stdout "196 patches"
    check_py "vision attnmap" '
import sys
import numpy as np
P = np.load(sys.argv[1] + ".npy")
assert P.shape == (2, 197, 197), P.shape
assert np.allclose(P.sum(-1), 1, atol=1e-4)
' "$WORK/vmap"
    end

    begin "an image for a language model: one-line error"
    run attnmap --model "$WORK/lm_soft" --image 0 --out "$WORK/bad.png"
    check_error 1 "language model"
    check_absent "$WORK/bad.npy"
    end

    begin "text for a vision model: one-line error"
    run attnmap --model "$WORK/vit_soft" --text "$WORK/short.txt" --out "$WORK/bad2.png"
    check_error 1 "vision model"
    end

    begin "vision models with different patch grids: the counts named"
    run train --precision f32 $VIT --patch 4 --out "$WORK/vit_p4"
    check_ok
    run compare --model "$WORK/vit_soft" --model "$WORK/vit_p4" --image 0 --images "$IMG" --out "$WORK/bad5.png"
    check_error 1 "vit_p4 has 49 patches, the first model 196"
    check_absent "$WORK/bad5.npy"
    end

    begin "image index out of range"
    run compare --model "$WORK/vit_soft" --image 100 --images "$IMG" --out "$WORK/bad3.png"
    check_error 1 "out of range"
    run attnmap --model "$WORK/vit_soft" --image 10000 --out "$WORK/bad4.png"
    check_error 1 "out of range"
    end
fi

begin "compare needs --text or --image"
run compare --model "$WORK/lm_soft" --out "$WORK/x.png"
check_error 2 "text|image"
end

finish
