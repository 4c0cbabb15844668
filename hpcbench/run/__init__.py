"""Running suites: suite files, the task a notebook holds, run dirs, papermill, backends."""
