"""Entry point of the frozen app (PyInstaller runs this file as ``__main__``).

``--self-test`` is dispatched before Qt is imported so that it runs on machines without a display.
"""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()  # torch may spawn helper processes through multiprocessing
    if "--self-test" in sys.argv[1:]:
        from app.self_test import main as self_test_main

        sys.exit(self_test_main([a for a in sys.argv[1:] if a != "--self-test"]))
    from app.launch import main

    sys.exit(main())
