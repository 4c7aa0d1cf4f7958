from labengine.cli import main

raise SystemExit(main())
