{
  "targets": [
    {
      "target_name": "memmerge",
      "sources": ["memmerge.c"],
      "cflags": ["-Wall", "-Wextra", "-O2"]
    }
  ]
}
