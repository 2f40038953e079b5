export { SecretBox } from "./secret-box.js";
export { type SecretInfo, Secrets, type SecretsOptions } from "./secrets.js";
