"""Settings for the whole test run, applied before any notebook kernel starts."""
import os

os.environ["COURSE_OFFLINE"] = "1"  # a test never downloads: load_mnist fails fast instead
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
