import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ERROR_KINDS, toWarrenError } from "../shared/index.js";

const CODES: Record<string, Code> = {
  invalid_argument: Code.InvalidArgument,
  unauthenticated: Code.Unauthenticated,
  permission_denied: Code.PermissionDenied,
  not_found: Code.NotFound,
  already_exists: Code.AlreadyExists,
  failed_precondition: Code.FailedPrecondition,
  resource_exhausted: Code.ResourceExhausted,
  unimplemented: Code.Unimplemented,
  unavailable: Code.Unavailable,
  internal: Code.Internal,
};

/** Anything a handler throws, as the ConnectError the E2B SDK expects. */
export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  const error = toWarrenError(err);
  return new ConnectError(
    error.message,
    CODES[ERROR_KINDS[error.kind].connect] ?? Code.Internal,
    undefined,
    undefined,
    error,
  );
}

async function* mapStreamErrors<T>(stream: AsyncIterable<T>): AsyncIterable<T> {
  try {
    yield* stream;
  } catch (err) {
    throw toConnectError(err);
  }
}

/** Maps errors from unary handlers and from the middle of response streams alike. */
export const errorInterceptor: Interceptor = (next) => async (req) => {
  try {
    const res = await next(req);
    return res.stream ? { ...res, message: mapStreamErrors(res.message) } : res;
  } catch (err) {
    throw toConnectError(err);
  }
};
