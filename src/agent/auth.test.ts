import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { getSignature } from "e2b";
import { fileSignature, requireFileAccess, userFromBasicAuth } from "./auth.js";
import { AgentState } from "./state.js";

describe("file URL signatures", () => {
  it("match the e2b SDK's own signing", async () => {
    const expiration = 1_900_000_000;
    const sdk = await getSignature({
      path: "/a b.txt",
      operation: "write",
      user: "user",
      envdAccessToken: "tok",
      expirationInSeconds: undefined,
    });
    assert.equal(fileSignature("/a b.txt", "write", "user", "tok"), sdk.signature);
    const sdkExp = await getSignature({
      path: "x",
      operation: "read",
      user: undefined,
      envdAccessToken: "tok",
      expirationInSeconds: 60,
    });
    assert.ok(sdkExp.expiration);
    assert.equal(fileSignature("x", "read", "", "tok", sdkExp.expiration), sdkExp.signature);
    assert.notEqual(
      fileSignature("x", "read", "", "tok", expiration),
      fileSignature("x", "write", "", "tok", expiration),
    );
  });

  it("accept the token, a valid signature, and nothing else", () => {
    const state = new AgentState();
    state.accessToken = "tok";
    const base = {
      path: "f",
      username: undefined,
      operation: "read" as const,
      signatureExpiration: undefined,
    };
    requireFileAccess(state, { ...base, token: "tok", signature: undefined });
    requireFileAccess(state, {
      ...base,
      token: undefined,
      signature: fileSignature("f", "read", "", "tok"),
    });
    assert.throws(
      () => requireFileAccess(state, { ...base, token: undefined, signature: undefined }),
      /missing signature query parameter/,
    );
    assert.throws(
      () => requireFileAccess(state, { ...base, token: "bad", signature: undefined }),
      /present in header but does not match/,
    );
    assert.throws(
      () =>
        requireFileAccess(state, {
          ...base,
          token: "bad",
          signature: fileSignature("f", "read", "", "tok"),
        }),
      /present in header but does not match/,
    );
    assert.throws(
      () =>
        requireFileAccess(state, {
          ...base,
          token: undefined,
          signature: fileSignature("f", "write", "", "tok"),
        }),
      /invalid signature/,
    );
    const expired = {
      ...base,
      token: undefined,
      signatureExpiration: "100",
      signature: fileSignature("f", "read", "", "tok", 100),
    };
    assert.throws(() => requireFileAccess(state, expired), /signature is already expired/);
  });

  it("read the user from Basic auth", () => {
    assert.equal(userFromBasicAuth(`Basic ${Buffer.from("root:").toString("base64")}`), "root");
    assert.equal(userFromBasicAuth(undefined), undefined);
    assert.throws(() => userFromBasicAuth("Bearer x"), /malformed/);
  });
});
