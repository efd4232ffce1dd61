from .commands import main
from .commands._common import exit_process

exit_process(main())
