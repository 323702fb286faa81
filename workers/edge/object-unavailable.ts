import { AppError } from '../kernel/errors';
import { log } from '../kernel/log';

/**
 * A Durable Object call on a request's path whose failure is not the request's fault: the
 * object restarting under it (a deploy, an eviction), overloaded, or out of reach. Such a
 * failure is the contract's 503 UNAVAILABLE with Retry-After: 1 (`message` says what could not
 * be had), logged as `event`; what the object keeps is in its storage, and the next call meets
 * it. A refusal the call gives (an AppError) passes as it is.
 */
export async function objectCall<T>(event: string, fields: Record<string, unknown>, message: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof AppError) {
      throw error;
    }
    log.warn(event, { ...fields, error });
    throw new AppError('UNAVAILABLE', message, { 'retry-after': '1' });
  }
}
