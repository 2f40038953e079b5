import assert from "node:assert/strict";
import { it } from "node:test";
import { webhookSignature } from "./signature.js";

// Vectors computed apart (Python: base64(sha256(secret + body)), "=" stripped), as E2B's
// docs tell receivers to verify.
it("is E2B's v1 signature: base64 of SHA-256 over secret then body, standard alphabet, no padding", () => {
  const body = '{"id":"e1","type":"sandbox.lifecycle.created"}';
  assert.equal(webhookSignature("whsec-test", body), "3A8vp3JqRDe7hIwv3L6fOC9zny8+O+yf97tNMjaNTLs");
  assert.equal(webhookSignature("k", "{}"), "B8uaCyvnt1dnwQP103CzZs/DBy1nxZKk+2/NFAjTaTQ");
});
