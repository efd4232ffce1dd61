"""A correct candidate whose import "builds a kernel": it writes a build's notices (and other chatter) on stderr and
takes a second, as a cold build of a real kernel does in minutes. In a worker its stderr is a file: the parent must
pass the build's notices on to its console as they come, and nothing else."""

import sys
import time

from kernels import BUILD_NOTICE_PREFIX

from ._common import correct

print(f"{BUILD_NOTICE_PREFIX}building fake.cu with fakecc (-arch=sm_90) (first use of this source and these flags)", file=sys.stderr, flush=True)
print("some other chatter on stderr", file=sys.stderr, flush=True)
time.sleep(1.0)
print(f"{BUILD_NOTICE_PREFIX}built fake.cu with fakecc (-arch=sm_90) in 1 s", file=sys.stderr, flush=True)


def route(scores, bias, topk, renormalize, rsf):
    return correct(scores, bias, topk, renormalize, rsf)
