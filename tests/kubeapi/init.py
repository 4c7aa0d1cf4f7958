"""A pod's first process: sets the UTS namespace's hostname, then becomes the container's command.

Run by the stand-in kubelet inside `unshare --pid --fork --mount-proc --uts`, so the command it
execs is PID 1 of its pod, as a container runtime makes it. Standalone (stdlib only): it runs
before anything of the project is importable in the pod.

    python init.py --hostname NAME -- ARGV...
"""

import os
import socket
import sys


def main(args: list[str]) -> None:
    if len(args) < 4 or args[0] != "--hostname" or args[2] != "--":
        sys.exit("usage: init.py --hostname NAME -- ARGV...")
    socket.sethostname(args[1])
    argv = args[3:]
    try:
        os.execvpe(argv[0], argv, os.environ)
    except OSError as exc:
        # as runc reports an entrypoint it cannot exec; 127 is the shell's "not found"
        print(f'exec: "{argv[0]}": {exc.strerror}', file=sys.stderr)
        sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main(sys.argv[1:])
