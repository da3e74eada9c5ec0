#!/usr/bin/env bash
# test_vision.sh: `attnlab train --task vision` end to end on a small synthetic
# Fashion-MNIST-shaped data set (IDX files, gzip; 28 x 28 images whose class
# is where a bright 7 x 7 block sits), so it runs in seconds and does not need
# the Debian package: the run leaves a checkpoint with the documented names,
# log.jsonl has accuracies, it learns, eval and info work, an interrupted
# and resumed run equals an uninterrupted one bit for bit, a run started
# from it (--init-from) keeps its image statistics and scores at step 0 what
# eval scores, and bad input is refused with one line.
#
# usage: bash tests/cli/test_vision.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

IMG=$WORK/images
mkdir -p "$IMG"
# make_set DIR SPLIT N SEED: N images of class c = i % 10 over noise: every
# 7 x 7 cell (one patch at --patch 7) holds a bright 2 x 2 mark at an offset
# that depends on the class, in a random half of the cells
make_set() {
    "$PY" - "$@" <<'EOF'
import gzip, struct, sys
import numpy as np
d, split, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(seed)
lab = (np.arange(n) % 10).astype(np.uint8)
img = rng.integers(0, 90, size=(n, 28, 28))
for i, c in enumerate(lab):
    oy, ox = 3 * (c // 5), c % 5
    for cell in np.flatnonzero(rng.random(16) < 0.5):
        y, x = 7 * (cell // 4) + oy, 7 * (cell % 4) + ox
        img[i, y:y + 2, x:x + 2] += 160
def idx(path, a):
    a = np.ascontiguousarray(a, dtype=np.uint8)
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 8, a.ndim) + b"".join(struct.pack(">I", s) for s in a.shape) + a.tobytes())
idx("%s/%s-images-idx3-ubyte.gz" % (d, split), img)
idx("%s/%s-labels-idx1-ubyte.gz" % (d, split), lab)
EOF
}
make_set "$IMG" train 600 1
make_set "$IMG" t10k 200 2

TINY=(--task vision --images "$IMG" --patch 7 --layers 1 --hidden 32 --heads 2 --batch 16 --threads 2 --quiet)

# ---------------------------------------------------------------- training

M=$WORK/vit
begin "train --task vision: exit 0, checkpoint, training state, log"
run train --precision f32 "${TINY[@]}" --out "$M" --steps 60 --lr 3e-3 --warmup 5 --eval-every 20 --eval-images 50 --train-subset 400
check_ok
check_stderr_empty
for f in config.json model.safetensors train_state.safetensors log.jsonl; do check_exists "$M/$f"; done
check_no_tmp "$M"
end

begin "config.json: ViT architecture, image fields, task vision, no LM keys"
check_py "bad config.json" '
import json, sys
c = json.load(open(sys.argv[1]))
assert c["architectures"] == ["AttnlabViTForImageClassification"], c["architectures"]
assert (c["image_size"], c["patch_size"], c["num_channels"], c["num_labels"]) == (28, 7, 1, 10), c
assert 0 < c["image_mean"] < 1 and 0 < c["image_std"] < 1, c
a = c["attnlab"]
assert a["task"] == "vision" and a["attention"] == "mha" and a["score"] == "softmax", a
assert a["train"]["train_subset"] == 400 and a["train"]["images"] == sys.argv[2], a["train"]
for k in ("vocab_size", "max_position_embeddings", "rope_theta"):
    assert k not in c, "LM key " + k
' "$M/config.json" "$IMG"
end

begin "model.safetensors: the documented tensor names and shapes"
check_py "bad tensor names" '
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
shapes = {k: v["shape"] for k, v in h.items() if k != "__metadata__"}
want = {"vit.patch_embed.weight": [32, 49], "vit.patch_embed.bias": [32], "vit.cls_token": [32],
        "vit.pos_embed": [17, 32], "model.norm.weight": [32], "classifier.weight": [10, 32],
        "classifier.bias": [10], "model.layers.0.self_attn.q_proj.weight": [32, 32],
        "model.layers.0.mlp.down_proj.weight": [32, 96]}
for k, v in want.items():
    assert shapes.get(k) == v, "%s: %s, expected %s" % (k, shapes.get(k), v)
assert not any(k.startswith(("model.embed_tokens", "lm_head")) for k in shapes), "LM tensors present"
' "$M/model.safetensors"
end

begin "log.jsonl: every step; val_loss/val_accuracy every 20 steps, all test images at the end"
check_py "bad log" '
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == list(range(1, 61)), "steps"
for r in rows:
    for k in ("train_loss", "lr", "grad_norm", "images_per_s", "tokens_per_s"):
        assert math.isfinite(r[k]), (r["step"], k)
ev = [r for r in rows if "val_accuracy" in r]
assert [r["step"] for r in ev] == [20, 40, 60], [r["step"] for r in ev]
assert [r["val_images"] for r in ev] == [50, 50, 200], [r["val_images"] for r in ev]
assert 0 <= ev[-1]["val_accuracy"] <= 1 and math.isfinite(ev[-1]["val_loss"])
' "$M/log.jsonl"
end

begin "it learns: test accuracy >= 60% (chance 10%)"
check_py "did not learn" '
import json, sys
last = [json.loads(l) for l in open(sys.argv[1])][-1]
assert last["val_accuracy"] >= 0.6, "val_accuracy %.3f" % last["val_accuracy"]
' "$M/log.jsonl"
end

# ---------------------------------------------------------------- eval / info

begin "eval prints the test accuracy"
run eval --model "$M" --threads 2
check_ok
check_stdout "test accuracy [0-9.]+% \(([0-9]+) of 200 images\), loss [0-9.]+"
end

begin "eval --json agrees with the run's last evaluation"
run eval --model "$M" --json --batch 7
check_ok
check_py "eval JSON differs from the log" '
import json, sys
j = json.loads(open(sys.argv[1]).read())
last = [json.loads(l) for l in open(sys.argv[2])][-1]
assert j["task"] == "vision" and j["count"] == 200, j
assert abs(j["accuracy"] - last["val_accuracy"]) < 1e-6, (j["accuracy"], last["val_accuracy"])
assert abs(j["loss"] - last["val_loss"]) < 1e-4, (j["loss"], last["val_loss"])
assert j["correct"] == round(j["accuracy"] * 200), j
' "$OUTF" "$M/log.jsonl"
end

begin "eval --max-images 30"
run eval --model "$M" --max-images 30 --json
check_ok
check_py "count" 'import json,sys; j=json.load(open(sys.argv[1])); assert j["count"] == 30, j' "$OUTF"
end

begin "info: patches, parameters, FLOPs"
run info --model "$M"
check_ok
check_stdout "16 patches \+ CLS"
check_stdout "FLOPs/image"
run info --model "$M" --json
check_ok
check_py "info --json" '
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j["task"] == "vision" and j["patches"] == 16 and j["sequence"] == 17, j
assert j["params"] == j["params_embedding"] + j["params_blocks"] + j["params_head"], j
assert j["params_embedding"] == 32 * 49 + 32 + 32 + 17 * 32 and j["params_head"] == 330, j
assert abs(j["train_flops_per_image"] - 3 * j["fwd_flops_per_image"]) < 1e-5 * j["train_flops_per_image"], j
assert j["fwd_flops_per_image"] > 2 * 17 * j["params_blocks"], j
' "$OUTF"
end

begin "--score poly: N = patches (16), poly_scale auto, trains"
run train --precision f32 "${TINY[@]}" --out "$WORK/poly" --steps 5 --score poly --train-subset 64 --eval-images 20
check_ok
check_py "poly config" '
import json, sys
a = json.load(open(sys.argv[1]))["attnlab"]
assert a["score"] == "poly" and a["poly_scale"] == "auto" and a["score_n"] == 16 and a["poly_power"] == 3, a
' "$WORK/poly/config.json"
end

# ---------------------------------------------------------------- resume

# enough steps that a signal sent after the fifth logged step lands mid-run even with fast kernels
RFLAGS=("${TINY[@]}" --precision f32 --steps 300 --train-subset 100 --eval-every 50 --eval-images 40 --save-every 1000)

begin "uninterrupted reference run (300 steps, 100 images: many epochs)"
run train --precision f32 "${RFLAGS[@]}" --out "$WORK/runA"
check_ok
end

begin "SIGINT mid-run: exit 130 with a training state"
timeout 60 "$BIN" train "${RFLAGS[@]}" --out "$WORK/runB" >"$OUTF" 2>"$ERRF" </dev/null &
pid=$!
i=0
while [ "$(wc -l 2>/dev/null <"$WORK/runB/log.jsonl" || echo 0)" -lt 5 ] && kill -0 "$pid" 2>/dev/null; do
    sleep 0.02
    i=$((i + 1))
    [ $i -lt 3000 ] || break
done
kill -INT "$pid" 2>/dev/null
wait "$pid"
RC=$?
check_no_crash
check_status 130
check_one_line_error "interrupted at step"
check_exists "$WORK/runB/train_state.safetensors"
[ "$(wc -l <"$WORK/runB/log.jsonl")" -lt 300 ] || note "the run finished before the signal"
end

begin "--resume completes it, byte-identical to the uninterrupted run"
run train --precision f32 --out "$WORK/runB" --resume --threads 2 --quiet
check_ok
check_stderr "resuming"
check_same_file "$WORK/runA/model.safetensors" "$WORK/runB/model.safetensors"
check_py "logs differ" '
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in b] == list(range(1, 301)), [r["step"] for r in b]
key = lambda r: (r["train_loss"], r["lr"], r.get("val_loss"), r.get("val_accuracy"))
bad = [x["step"] for x, y in zip(a, b) if key(x) != key(y)]
assert not bad, "first differing step %d" % bad[0]
' "$WORK/runA/log.jsonl" "$WORK/runB/log.jsonl"
end

# ---------------------------------------------------------------- bad input

begin "--images DIR that does not exist: one-line error"
run train --precision f32 --task vision --images "$WORK/nowhere" --out "$WORK/bad1" --steps 2 --quiet
check_error 1 "nowhere.*(no such file|fashion-mnist)"
end

begin "truncated training images: one-line error naming the file"
mkdir -p "$WORK/trunc"
cp "$IMG"/*.gz "$WORK/trunc/"
head -c 3000 "$IMG/train-images-idx3-ubyte.gz" >"$WORK/trunc/train-images-idx3-ubyte.gz"
run train --precision f32 "${TINY[@]}" --images "$WORK/trunc" --out "$WORK/bad2" --steps 2
check_error 1 "train-images-idx3-ubyte.gz.*(truncated|gzip)"
end

begin "labels that do not match the images: one-line error"
mkdir -p "$WORK/mismatch"
cp "$IMG"/*.gz "$WORK/mismatch/"
cp "$IMG/t10k-labels-idx1-ubyte.gz" "$WORK/mismatch/train-labels-idx1-ubyte.gz"
run train --precision f32 "${TINY[@]}" --images "$WORK/mismatch" --out "$WORK/bad3" --steps 2
check_error 1 "200 labels for 600 images"
end

begin "eval with a bad --images dir: one-line error"
run eval --model "$M" --images "$WORK/nowhere"
check_error 1 "nowhere"
end

begin "--context with --task vision: usage error"
run train --precision f32 "${TINY[@]}" --out "$WORK/bad4" --context 64
check_error 2 "--context does not apply to --task vision"
end

begin "--patch 5 (does not divide 28): usage error"
run train --precision f32 "${TINY[@]}" --out "$WORK/bad5" --patch 5
check_error 2 "--patch must divide"
end

begin "--patch without --task vision: usage error"
run train --precision f32 --out "$WORK/bad6" --patch 2
check_error 2 "--patch applies only to --task vision"
end

begin "--task speech: usage error"
run train --precision f32 --out "$WORK/bad7" --task speech
check_error 2 "unknown task"
end

begin "eval --data on a vision model: usage error"
run eval --model "$M" --data "$IMG/t10k-labels-idx1-ubyte.gz"
check_error 2 "--data does not apply to a vision model"
end

# ---------------------------------------------------------------- bf16 (issue 14)

begin "train --task vision --precision bf16: repeats bit for bit, --resume bit-exact, eval in both precisions"
BF=("${TINY[@]}" --precision bf16 --train-subset 100 --eval-every 10 --eval-images 40)
run train "${BF[@]}" --steps 20 --out "$WORK/vbf"
check_ok
run train "${BF[@]}" --steps 20 --out "$WORK/vbf2"
check_ok
check_same_file "$WORK/vbf/model.safetensors" "$WORK/vbf2/model.safetensors"
run train "${BF[@]}" --steps 10 --out "$WORK/vbf3"
check_ok
run train --out "$WORK/vbf3" --resume --steps 20 --threads 2 --quiet
check_ok
check_same_file "$WORK/vbf/model.safetensors" "$WORK/vbf3/model.safetensors"
run eval --model "$WORK/vbf" --max-images 50 --json --precision f32
check_ok
cp "$OUTF" "$WORK/vbf_f32.json"
run eval --model "$WORK/vbf" --max-images 50 --json --precision bf16
check_ok
check_py "vision bf16 run or its eval wrong" '
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))["attnlab"]["train"]
assert c["precision"] == "BF16", c
assert all(json.loads(l)["precision"] == "BF16" for l in open(sys.argv[1] + "/log.jsonl"))
a, b = (json.load(open(p)) for p in sys.argv[2:4])
assert (a["precision"], b["precision"]) == ("F32", "BF16"), (a, b)
assert a["count"] == b["count"] == 50 and abs(a["loss"] - b["loss"]) <= 0.02 * a["loss"], (a, b)
' "$WORK/vbf" "$WORK/vbf_f32.json" "$OUTF"
end

# ---------------------------------------------------------------- uptraining from a vision run

# (the run keeps the source's image statistics: with its own, those of another --train-subset, step 0 scored
# another model than eval does)
begin "train --init-from a vision run: the vision flags, step 0 scores what eval scores, origin recorded"
run train --init-from "$M" --out "$WORK/vup" --images "$IMG" --train-subset 64 --eval-images 20 --steps 2 \
    --eval-every 2 --threads 2 --quiet --precision f32
check_ok
run eval --model "$M" --images "$IMG" --max-images 20 --json --precision f32
check_ok
check_py "a vision uptraining run is wrong" '
import json, os, sys
run, src = sys.argv[1], sys.argv[2]
first = json.loads(open(run + "/log.jsonl").readline())
ev = json.loads(open(sys.argv[3]).read())
assert first["step"] == 0 and first["init_from"] == os.path.realpath(src), first
assert abs(first["val_loss"] - ev["loss"]) <= 1e-6 and first["val_images"] == 20, (first, ev)
assert abs(first["val_accuracy"] - ev["accuracy"]) <= 1e-9, (first, ev)
c, s = json.load(open(run + "/config.json")), json.load(open(src + "/config.json"))
t = c["attnlab"]["train"]
assert t["batch"] == 64 and t["train_subset"] == 64 and t["init_from"] == os.path.realpath(src), t
for k in ("image_size", "patch_size", "hidden_size", "num_hidden_layers", "num_labels"):
    assert c[k] == s[k], k
' "$WORK/vup" "$M" "$OUTF"
end

begin "train --init-from a vision run: text flags, another patch or task are usage errors"
run train --init-from "$M" --out "$WORK/vbad1" --data "$WORK/x.txt"
check_error 2 "--data does not apply to .*'s vision model"
run train --init-from "$M" --out "$WORK/vbad2" --patch 4 --images "$IMG"
check_error 2 "--patch 4, but its config has 7"
run train --init-from "$M" --out "$WORK/vbad3" --task lm
check_error 2 "--task lm, but its model is vision"
for d in vbad1 vbad2 vbad3; do check_absent "$WORK/$d"; done
end

begin "no temp files anywhere in the work dir"
check_no_tmp "$WORK"
end

finish
