"""`ckpt-sweep VERB ...`: run (the Hydra multirun), report."""
from __future__ import annotations

import sys

USAGE = """usage: ckpt-sweep VERB [ARGS]

verbs:
  run [HYDRA OVERRIDES]   run a sweep (always a multirun), e.g.
                          ckpt-sweep run sweep=packed-latents mode=none,layer,unsloth
                          ckpt-sweep run --cfg job    (show the composed config)
"""


def run(args: list[str]) -> None:
    from .app import hydra_app

    if not any(a in ("-m", "--multirun", "--cfg", "-c", "--help", "-h", "--info", "-i") for a in args):
        args = ["--multirun", *args]
    sys.argv = ["ckpt-sweep run", *args]
    hydra_app()


VERBS = {"run": run}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        sys.exit(f"ckpt-sweep: unknown verb {verb!r}; valid verbs: {', '.join(VERBS)}\n\n{USAGE}")
    VERBS[verb](rest)


if __name__ == "__main__":
    main()
