#!/usr/bin/env python3
"""A stand-in for nvidia-cuda-mps-control in the tests of tenant_isolation = mps: it checks
how remorad runs the control program, not MPS itself (the GPU suite runs the real one).

  fake_mps_control.py -f   the control daemon in foreground: makes the pipe "control" in
                           CUDA_MPS_PIPE_DIRECTORY and logs, to CUDA_MPS_LOG_DIRECTORY/fake.log,
                           "started PID" and each command it reads; ends at "quit"
  fake_mps_control.py      a client: writes its standard input to the daemon's pipe
"""
import os
import sys

pipe_dir = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
log_dir = os.environ["CUDA_MPS_LOG_DIRECTORY"]
control = os.path.join(pipe_dir, "control")


def log(line):
    with open(os.path.join(log_dir, "fake.log"), "a") as f:
        f.write(line + "\n")


if sys.argv[1:] == ["-f"]:
    log(f"started {os.getpid()}")  # before the pipe: remorad waits for the pipe
    if os.path.exists(control):
        os.unlink(control)  # a killed predecessor's
    os.mkfifo(control, 0o600)
    while True:
        with open(control) as p:  # waits for a writer; EOF when it closes
            for line in p:
                log("command " + line.strip())
                if line.strip() == "quit":
                    os.unlink(control)
                    sys.exit(0)
elif not sys.argv[1:]:
    fd = os.open(control, os.O_WRONLY | os.O_NONBLOCK)  # fails at once with no daemon reading
    os.write(fd, sys.stdin.read().encode())
    os.close(fd)
else:
    sys.exit(f"fake_mps_control.py: unknown arguments {sys.argv[1:]}")
