{
  "targets": [
    {
      "target_name": "nslisten",
      "sources": ["nslisten.c"],
      "cflags": ["-Wall", "-Wextra", "-O2"]
    }
  ]
}
