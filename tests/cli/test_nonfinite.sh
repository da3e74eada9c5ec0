#!/usr/bin/env bash
# test_nonfinite.sh: training stops on non-finite values (issue 19, item 3). An
# absurd learning rate that makes the weights inf/nan stops the run in one line
# naming the step, the last good checkpoint stays as it was, and `--resume`
# with a lower --lr (a logged change of schedule that config.json records)
# continues from it.
#
# usage: bash tests/cli/test_nonfinite.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

DATA=$WORK/data.txt
make_text "$DATA" 300
R=$WORK/run
TINY=(--precision f32 --data "$DATA" --out "$R" --layers 1 --hidden 32 --heads 2 --context 16 --batch 2
      --eval-every 0 --eval-tokens 256 --warmup 0 --threads 2 --quiet)

begin "a good start: 4 steps saved"
run train "${TINY[@]}" --steps 4 --lr 1e-3 --save-every 2
check_ok
for f in model.safetensors train_state.safetensors config.json log.jsonl; do cp "$R/$f" "$WORK/$f.good"; done
end

begin "weights made inf by --lr 1e300: exit 1, one line naming step 5, the checkpoint of step 4 kept"
run train --out "$R" --resume --steps 8 --lr 1e300 --quiet
check_no_crash
check_status 1
# the note of the new schedule first, the error last: one line
check_py "stderr lacks the note or the one-line error" '
import re, sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", lines
assert re.search(r"^attnlab: note: .*new schedule from step 4: lr 0.001 -> 1e\+300", lines[0]), lines[0]
assert re.search(r"^attnlab: train: training diverged: weights are not finite after step 5 \(lr [0-9.e+]+\); "
                 r"the last good checkpoint \(step 4\) is kept \(continue it with --resume and a lower --lr\)$",
                 lines[-2]), lines[-2]
' "$ERRF"
check_same_file "$WORK/model.safetensors.good" "$R/model.safetensors"
check_same_file "$WORK/train_state.safetensors.good" "$R/train_state.safetensors"
check_no_tmp "$R"
end

begin "--resume with a lower --lr continues from step 4 to 8, logged and recorded"
run train --out "$R" --resume --steps 8 --lr 5e-4 --quiet
check_ok
check_stderr "new schedule from step 4: lr 1e\+300 -> 0.0005"
check_py "log.jsonl or config.json lacks the change" '
import json, math, sys
def lr_at(lr, steps, s, ratio=0.1):  # warmup 0, then cosine to ratio * lr (al_lr_at)
    lo = lr * ratio
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * min(1.0, s / steps)))
rows = [json.loads(l) for l in open(sys.argv[1])]
sched = [r for r in rows if "schedule" in r]
assert sched and sched[-1]["step"] == 4 and sched[-1]["schedule"] == {"lr": 0.0005, "warmup": 0, "min_lr_ratio": 0.1,
                                                                       "steps": 8}, sched
steps = [r["step"] for r in rows if "train_loss" in r]
assert steps == list(range(1, 9)), steps
for r in rows:
    if "train_loss" in r:  # steps 1-4 on the first schedule (4 steps of 1e-3), 5-8 on the new one
        want = lr_at(1e-3, 4, r["step"] - 1) if r["step"] <= 4 else lr_at(5e-4, 8, r["step"] - 1)
        assert abs(r["lr"] - want) <= 1e-5 * want, (r, want)
cfg = json.load(open(sys.argv[2]))
assert cfg["attnlab"]["train"]["lr"] == 0.0005 and cfg["attnlab"]["train"]["steps"] == 8, cfg["attnlab"]
assert cfg["attnlab"]["step"] == 8, cfg["attnlab"]
' "$R/log.jsonl" "$R/config.json"
end

begin "--lr on --resume of a finished run is a usage error (no steps left)"
cp "$R/model.safetensors" "$WORK/model.done"
run train --out "$R" --resume --lr 1e-4
check_error 2 "--lr.*--resume.*steps left.*--steps"
check_same_file "$WORK/model.done" "$R/model.safetensors"
end

begin "the same --lr on --resume is no change: no note"
run train --out "$R" --resume --steps 9 --lr 5e-4 --quiet
check_ok
grep -q "note" "$ERRF" && note "a note for no change"
end

finish
