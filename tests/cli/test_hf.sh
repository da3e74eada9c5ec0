#!/usr/bin/env bash
# test_hf.sh: Hugging Face checkpoints through the commands, and every kind of
# bad input they can bring: a missing shard, an index naming a tensor its
# shard lacks or lacking one the config needs, a tensor whose shape or dtype
# does not match config.json, a truncated shard, an unexpected tensor, and
# configs attnlab refuses by name (architecture, rope_scaling type,
# mixture-of-experts layers, hidden_act, mlp_bias, attention_bias, Qwen2's
# sliding window). Each failure is one stderr line "attnlab: <cmd>: ...",
# exit 1 (2 for usage errors), nothing on stdout, no crash. The good
# checkpoints run eval, generate, info, attnmap, heads, compare, explore and
# bench decode; --weights bf16 runs a BF16 checkpoint as stored and refuses
# others (a usage error).
#
# usage: bash tests/cli/test_hf.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"
REF=$(readlink -f "$(dirname "$0")/../ref")

# mk DIR FAMILY DTYPE SHARDS [CONFIG_JSON_OVERRIDES]: a tiny random checkpoint
mk() {
    "$PY" - "$REF" "$@" <<'EOF'
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import make_hf_checkpoint as M
out, fam, dtype, shards = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
extra = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
cfg = M.make_config(fam, **{k: v for k, v in extra.items() if k in ("vocab", "tied", "G")})
cfg.update({k: v for k, v in extra.items() if k not in ("vocab", "tied", "G")})
M.write_checkpoint(out, cfg, M.random_weights(cfg, np.random.default_rng(3)), dtype, shards)
EOF
}

# edit_json FILE PYTHON: applies `PYTHON` (a statement on dict j) to a JSON file
edit_json() {
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(j, open(sys.argv[1], "w"))
EOF
}

DATA=$WORK/data.txt
make_text "$DATA" 40

begin "setup: checkpoints in HF layout"
mk "$WORK/llama" llama BF16 1 || note "llama"
mk "$WORK/qwen" qwen2 BF16 3 || note "qwen2 sharded"
mk "$WORK/ds" deepseek_v2 F32 1 || note "deepseek"
mk "$WORK/mistral" mistral F32 1 '{"sliding_window": 24}' || note "mistral"
mk "$WORK/small_vocab" llama F32 1 '{"vocab": 200}' || note "small vocab"
check_exists "$WORK/qwen/model.safetensors.index.json"
check_exists "$WORK/qwen/model-00003-of-00003.safetensors"
end

for m in llama qwen ds mistral; do
    begin "good checkpoint $m: eval, generate, info"
    run eval --model "$WORK/$m" --data "$DATA" --context 20 --verbose
    check_ok
    check_stdout "loss .* nats"
    check_stdout "memory: .*memory-mapped"
    run generate --ids --model "$WORK/$m" --prompt "the" -n 6 --temperature 0
    check_ok
    check_stdout "^[0-9]+( [0-9]+){5}$"
    run info --model "$WORK/$m" --json
    check_ok
    check_stdout '"mapped":true'
    end
done

begin "info: dtype, bytes in place, resident memory"
run info --model "$WORK/qwen"
check_ok
check_stdout "Qwen2ForCausalLM BF16"
check_stdout "used in place from the memory-mapped files"
check_stdout "resident"
end

begin "analyses on an HF checkpoint: attnmap, heads, compare, explore"
run attnmap --model "$WORK/llama" --text "$DATA" --layer 1 --head 0,2 --max-tokens 40 --out "$WORK/map.png"
check_ok
check_exists "$WORK/map.npy"
run heads --model "$WORK/llama" --model "$WORK/ds" --out "$WORK/heads.png"
check_ok
run compare --model "$WORK/llama" --model "$WORK/qwen" --text "$DATA" --max-tokens 30 --out "$WORK/cmp.png"
check_ok
run explore --model "$WORK/ds" --text "$DATA" --max-tokens 24 --out "$WORK/ex.html"
check_ok
check_exists "$WORK/ex.html"
end

begin "bench decode on an HF checkpoint"
run bench decode --model "$WORK/qwen" --decode-context 48 --tokens 4 --triad-mb 4 --precision f32 --json
check_ok
check_stdout '"weights":"BF16"'
end

begin "--weights bf16: a BF16 checkpoint runs as stored, an F32 one is refused"
run bench decode --model "$WORK/qwen" --decode-context 48 --tokens 4 --triad-mb 4 --precision f32 --json --weights bf16
check_ok
check_stdout '"weights":"BF16"'
run generate --ids --model "$WORK/llama" --prompt "the" -n 4 --temperature 0 --weights bf16
check_ok
check_stdout "^[0-9]+( [0-9]+){3}$"
for cmd in "generate --prompt the" "eval --data $DATA" "bench decode --decode-context 48 --tokens 4"; do
    # shellcheck disable=SC2086
    run $cmd --model "$WORK/ds" --weights bf16
    check_error 2 "--weights bf16: this Hugging Face checkpoint holds F32 matrices.*only a BF16 checkpoint"
    check_stdout_empty
done
end

begin "eval of an HF checkpoint needs --data"
run eval --model "$WORK/llama"
check_error 2 "data"
check_stdout_empty
end

begin "Mistral: a context beyond the sliding window is refused"
run eval --model "$WORK/mistral" --data "$DATA" --context 25
check_error 1 "context 25.*sliding_window 24"
check_stdout_empty
run eval --model "$WORK/mistral" --data "$DATA" --context 24
check_ok
end

begin "a tokenizer with more ids than the model is refused"
run eval --model "$WORK/small_vocab" --data "$DATA" --context 16
check_error 1 "tokenizer.json has 256 token ids but the model only 200"
check_stdout_empty
run generate --model "$WORK/small_vocab" --prompt "abc" -n 2
check_error 1 "tokenizer.json has 256 token ids but the model only 200"
check_stdout_empty
end

begin "training an HF checkpoint is refused"
run train --precision f32 --out "$WORK/llama" --resume
check_error 1 "."
check_stdout_empty
end

# ---------------------------------------------------------------- damaged checkpoints

damaged() { # damaged NAME SRC: a fresh copy of $WORK/SRC in $WORK/bad_NAME (echoes the path)
    local d=$WORK/bad_$1
    rm -rf "$d"
    cp -r "$WORK/$2" "$d"
    echo "$d"
}
SH1=model-00001-of-00003.safetensors
SH2=model-00002-of-00003.safetensors
SH3=model-00003-of-00003.safetensors

d=$(damaged missing_shard qwen) && rm "$d/$SH2"
d=$(damaged index_wrong_shard qwen) && edit_json "$d/model.safetensors.index.json" \
    'k = next(k for k, v in j["weight_map"].items() if v == "'$SH3'"); j["weight_map"][k] = "'$SH1'"'
d=$(damaged index_lacks_tensor qwen) && edit_json "$d/model.safetensors.index.json" \
    'del j["weight_map"]["model.norm.weight"]'
d=$(damaged index_shard_path qwen) && edit_json "$d/model.safetensors.index.json" \
    'j["weight_map"]["model.norm.weight"] = "../qwen/'$SH1'"'
d=$(damaged index_not_json qwen) && echo '{"weight_map": ' >"$d/model.safetensors.index.json"
d=$(damaged truncated_shard qwen) && truncate -s -1000 "$d/$SH3"
d=$(damaged no_weights llama) && rm "$d/model.safetensors"
d=$(damaged wrong_shape llama) && st_edit "$WORK/llama/model.safetensors" "$d/model.safetensors" \
    shape model.layers.0.self_attn.q_proj.weight 16,64
d=$(damaged wrong_dtype ds) && st_edit "$WORK/ds/model.safetensors" "$d/model.safetensors" \
    dtype model.layers.1.self_attn.kv_b_proj.weight I32
d=$(damaged extra_tensor llama) && "$PY" - "$REF" "$d" <<'EOF'
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import make_hf_checkpoint as M
cfg = json.load(open(sys.argv[2] + "/config.json"))
w = M.random_weights(cfg, np.random.default_rng(3))
w["model.layers.0.mlp.experts.0.up_proj.weight"] = np.zeros((4, 4))
M.write_checkpoint(sys.argv[2], cfg, w, "BF16")
EOF
d=$(damaged arch llama) && edit_json "$d/config.json" 'j["architectures"] = ["GPT2LMHeadModel"]'
d=$(damaged yarn llama) && edit_json "$d/config.json" \
    'j["rope_scaling"] = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}'
d=$(damaged moe ds) && edit_json "$d/config.json" \
    'j.update(n_routed_experts=64, first_k_dense_replace=1, moe_layer_freq=1)'
d=$(damaged gelu llama) && edit_json "$d/config.json" 'j["hidden_act"] = "gelu"'
d=$(damaged mlp_bias llama) && edit_json "$d/config.json" 'j["mlp_bias"] = True'
d=$(damaged attention_bias llama) && edit_json "$d/config.json" 'j["attention_bias"] = True'
d=$(damaged qwen_window qwen) && edit_json "$d/config.json" 'j["use_sliding_window"] = True'
d=$(damaged llama3_incomplete llama) && edit_json "$d/config.json" \
    'j["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}'

declare -A WHY_RE=(
    [missing_shard]="$SH2.*no such file"
    [index_wrong_shard]="index.*puts tensor .* in $SH1, which does not hold it"
    [index_lacks_tensor]="missing tensor 'model.norm.weight'.*index"
    [index_shard_path]="not a file name in the directory"
    [index_not_json]="index.json.*JSON"
    [truncated_shard]="$SH3.*(outside|truncat|exceeds)"
    [no_weights]="model.safetensors.*no such file"
    [wrong_shape]="model.safetensors.*q_proj.weight.*shape \[16, 64\], expected \[32, 32\]"
    [wrong_dtype]="kv_b_proj.weight.*dtype I32, expected F32, BF16 or F16"
    [extra_tensor]="unexpected tensor 'model.layers.0.mlp.experts.0.up_proj.weight'"
    [arch]="config.json.*unsupported architecture 'GPT2LMHeadModel'"
    [yarn]="config.json.*unsupported rope_scaling type 'yarn'"
    [moe]="config.json.*mixture-of-experts.*n_routed_experts 64"
    [gelu]="config.json.*unsupported hidden_act 'gelu'"
    [mlp_bias]="config.json.*unsupported mlp_bias"
    [attention_bias]="config.json.*unsupported attention_bias true for LlamaForCausalLM"
    [qwen_window]="config.json.*unsupported use_sliding_window"
    [llama3_incomplete]="config.json.*llama3 rope_scaling needs high_freq_factor"
)
for v in missing_shard index_wrong_shard index_lacks_tensor index_shard_path index_not_json truncated_shard \
    no_weights wrong_shape wrong_dtype extra_tensor arch yarn moe gelu mlp_bias attention_bias qwen_window \
    llama3_incomplete; do
    d=$WORK/bad_$v
    for c in eval info generate; do
        case $c in
        eval) args=(eval --model "$d" --data "$DATA" --context 16) ;;
        info) args=(info --model "$d") ;;
        generate) args=(generate --model "$d" --prompt a -n 3) ;;
        esac
        begin "HF checkpoint $v: $c"
        run "${args[@]}"
        check_error 1 "${WHY_RE[$v]}"
        check_stdout_empty
        end
    done
done

begin "convert refuses a checkpoint of a family outside Llama's, naming it"
run convert --model "$WORK/qwen" --to mla --out "$WORK/conv_qwen" --calibration "$DATA"
check_error 2 "the source is a qwen2 checkpoint; conversion takes Llama-family ones \(llama, mistral\)"
check_absent "$WORK/conv_qwen"
end

begin "no temp files anywhere in the work dir"
check_no_tmp "$WORK"
end

finish
