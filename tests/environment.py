"""pytest plugin (loaded with `-p`, before pytest-django reads the settings): the environment tests run in.

Settings refuse to load with DEBUG off and no DJANGO_SECRET_KEY, so tests bring
their own key. Tests run with production settings otherwise, except that the
test client speaks plain HTTP, so the HTTPS redirect is off.
"""

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-secret-key-never-used-in-production-0123456789abcdef")
os.environ.setdefault("LUCIA_SSL_REDIRECT", "false")
