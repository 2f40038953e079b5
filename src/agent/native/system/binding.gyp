{
  "targets": [
    {
      "target_name": "system",
      "sources": ["system.c"],
      "cflags": ["-Wall", "-Wextra", "-O2"]
    }
  ]
}
