"""Run an OpenStack console-script entry point by name.

    /usr/bin/python3 launch.py PROG MODULE:FUNC [ARGS...]

Debian's python3-* library packages ship the code but not every console
script, so the rig calls the entry points directly.  PROG becomes argv[0]
(it is what `ps` shows and what oslo.config reports as the program).
"""
import importlib
import sys


def main():
    if len(sys.argv) < 3 or ":" not in sys.argv[2]:
        sys.exit(__doc__)
    prog, target = sys.argv[1], sys.argv[2]
    module_name, func_name = target.split(":", 1)
    sys.argv = [prog] + sys.argv[3:]
    func = getattr(importlib.import_module(module_name), func_name)
    sys.exit(func())


if __name__ == "__main__":
    main()
