{
  "targets": [
    {
      "target_name": "tapfd",
      "sources": ["tapfd.c"],
      "cflags": ["-Wall", "-Wextra", "-O2"]
    }
  ]
}
