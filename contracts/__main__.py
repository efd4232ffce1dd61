from .check import main

raise SystemExit(main())
