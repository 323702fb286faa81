import { AppError, unavailable } from '../kernel/errors';
import { log } from '../kernel/log';

type Marks = { durableObjectReset?: unknown; overloaded?: unknown; retryable?: unknown; remote?: unknown };

function marksOf(error: unknown): Marks {
  return typeof error === 'object' && error !== null ? (error as Marks) : {};
}

/**
 * Whether workerd marked the error as the callee's trouble, not the caller's: the object was
 * reset under the call (`durableObjectReset`: a deploy, an eviction, its isolate's limits, an
 * abort), it is overloaded (`overloaded`), or the call met a transient fault (`retryable`: the
 * connection to it was lost). workerd marks these wherever the call was made, so the error
 * handler answers them 503 UNAVAILABLE without each call being wrapped.
 */
export function markedUnavailable(error: unknown): boolean {
  const m = marksOf(error);
  return m.durableObjectReset === true || m.overloaded === true || m.retryable === true;
}

/**
 * A Durable Object call on a request's path whose failure is not the request's fault: the
 * object restarting under it (a deploy, an eviction), overloaded, or out of reach. Such a
 * failure is the contract's 503 UNAVAILABLE with Retry-After: 1 (`message` says what could not
 * be had), logged as `event`; what the object keeps is in its storage, and the next call meets
 * it. A refusal the call gives (an AppError) passes as it is, and so does an error the object's
 * own code threw (workerd marks it `remote`) that is not marked as an outage: a bug there, which
 * the error handler answers 500 and logs.
 */
export async function objectCall<T>(event: string, fields: Record<string, unknown>, message: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof AppError || (marksOf(error).remote === true && !markedUnavailable(error))) {
      throw error;
    }
    log.warn(event, { ...fields, error });
    throw unavailable(message);
  }
}
