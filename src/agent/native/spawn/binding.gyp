{
  "targets": [
    {
      "target_name": "spawn",
      "sources": ["spawn.c"],
      "cflags": ["-Wall", "-Wextra", "-O2"]
    }
  ]
}
