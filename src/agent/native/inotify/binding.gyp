{
  "targets": [
    {
      "target_name": "inotify",
      "sources": ["inotify.c"],
      "cflags": ["-Wall", "-Wextra", "-O2"]
    }
  ]
}
