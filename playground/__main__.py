"""``python -m playground memory --recipe qwen7b_ppo`` (one recipe) or ``--all`` (every GPU recipe): the memory
model's per-phase tables of docs/memory.md (estimates from the model's shape, never measured)."""

from __future__ import annotations

import argparse

from playground import GPU_RECIPES, memory_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    memory = commands.add_parser("memory", help="per-device memory of one step, phase by phase (an estimate)")
    group = memory.add_mutually_exclusive_group(required=True)
    group.add_argument("--recipe", help="a playground recipe, e.g. qwen7b_ppo")
    group.add_argument("--all", action="store_true", help="every GPU recipe")
    args = parser.parse_args(argv)
    names = GPU_RECIPES if args.all else (args.recipe,)
    print("\n\n".join(memory_table(name) for name in names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
