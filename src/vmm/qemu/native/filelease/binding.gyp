{
  "targets": [
    {
      "target_name": "filelease",
      "sources": ["filelease.c"],
      "cflags": ["-Wall", "-Wextra", "-O2"]
    }
  ]
}
