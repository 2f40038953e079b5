import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  DEFAULT_MIRRORS,
  debianMirrors,
  parseDeb822Sources,
  parseSourcesList,
} from "./apt-sources.js";

describe("apt sources", () => {
  it("reads the one-line format, options and comments included", () => {
    const sources = parseSourcesList(`# main
deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib
deb-src http://mirror.example/debian bookworm main
deb http://security.example/debian-security bookworm-security main # trailing
`);
    assert.deepEqual(sources, [
      {
        uris: ["http://mirror.example/debian"],
        suites: ["bookworm"],
        components: ["main", "contrib"],
      },
      {
        uris: ["http://security.example/debian-security"],
        suites: ["bookworm-security"],
        components: ["main"],
      },
    ]);
  });

  it("reads deb822 stanzas and skips disabled ones", () => {
    const sources = parseDeb822Sources(`Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://other.example/debian
Suites: bookworm
Components: main
Enabled: no
`);
    assert.deepEqual(sources, [
      {
        uris: ["http://deb.debian.org/debian"],
        suites: ["bookworm", "bookworm-updates"],
        components: ["main"],
      },
    ]);
  });

  it("picks the host's archive and security mirrors, else deb.debian.org", () => {
    const sources = [
      {
        uris: ["https://deb.nodesource.com/node_20.x"],
        suites: ["nodistro"],
        components: ["main"],
      },
      { uris: ["http://m.example/debian"], suites: ["bookworm"], components: ["main"] },
    ];
    assert.deepEqual(debianMirrors(sources, "bookworm"), {
      archive: "http://m.example/debian",
      security: DEFAULT_MIRRORS.security,
    });
    assert.deepEqual(debianMirrors([], "bookworm"), DEFAULT_MIRRORS);
  });
});
