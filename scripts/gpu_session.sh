#!/usr/bin/env bash
# One GPU session, prepared: stages run in the order given, each started only while the session's time
# allows, all into one folder that a session cut short still leaves whole (results.db, summary.md,
# logs/). Run again with the same OUT, it resumes: checks that passed and cells recorded are skipped.
#
#   scripts/gpu_session.sh OUT SECONDS STAGE...
#
# stages: core (the acceptance run's core checks), docs (the docs' packed-latents matrix, 10 timed
# steps a cell), studies (the acceptance run's studies). On a machine without internet run
# scripts/device_wheels.sh where pip works first: the wheels in .whl/ are installed here (all but this
# project's own, which runs from the checkout).
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/gpu_session.sh OUT SECONDS core|docs|studies..."
out=${1:?$usage}
budget=${2:?$usage}
shift 2
# Every argument is checked before the session's time is spent: a misspelled last stage would
# otherwise be found only after the stages before it ran.
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu_session.sh: SECONDS is a whole number of seconds, not '$budget'" >&2; exit 2; }
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
for stage in "$@"; do
  case $stage in
    core | docs | studies) ;;
    *) echo "gpu_session.sh: no stage '$stage' (stages: core, docs, studies); nothing was run" >&2 && exit 2 ;;
  esac
done
start=$SECONDS
RESERVE=20 # seconds kept for whoever packs OUT up after this script
left() { echo $((budget - RESERVE - (SECONDS - start))); }
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    $(ls .whl/*.whl | grep -v '/ckpt_sweep-') || exit 1
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
mkdir -p "$out/logs"
out=$(realpath "$out")
# versions.txt: the card, then one line of versions; what the imports print besides goes to the log
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader &&
    python3 -c "import sys, torch, diffusers, peft, transformers, torchao, sdnq, sqlalchemy, hydra; \
print(sys.version.split()[0], *(f'{m.__name__} {m.__version__}' for m in (torch, diffusers, peft, transformers, torchao, sqlalchemy, hydra)))" \
      2>>"$out/logs/versions.log"
} | tee -a "$out/versions.txt"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  echo "gpu_session.sh: no GPU, or a package the session needs does not import ($out/logs/versions.log):" >&2
  tail -n 3 "$out/logs/versions.log" >&2
  exit 1
fi
python3 -c "import sweep.cli, ckptlib.families" || exit 1 # fail fast, before the GPU time goes to checks

for stage in "$@"; do
  if [ "$(left)" -lt 60 ]; then
    echo "$stage: not started, $(left) s left"
    continue
  fi
  case $stage in
    core | studies) python3 scripts/gpu_acceptance.py --out "$out" --part "$stage" --budget-s "$(left)" ;;
    docs)
      timeout "$(left)" python3 -m sweep.cli run sweep=packed-latents device=cuda measure.steps=10 \
        "db.url=sqlite:///$out/results.db" "hydra.sweep.dir=$out/multirun" >>"$out/logs/docs.log" 2>&1
      echo "docs: exit $?"
      ;;
  esac
done
echo "gpu_session: $((SECONDS - start)) s"
