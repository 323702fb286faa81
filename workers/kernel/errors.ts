import type { ContentfulStatusCode } from 'hono/utils/http-status';

/** The contract's error codes and the HTTP status each one answers with. */
export const ERROR_STATUS = {
  INVALID_INPUT: 400,
  AMOUNT_MISMATCH: 400,
  UNAUTHENTICATED: 401,
  INVALID_SIGNATURE: 401,
  TOKEN_INVALID: 403,
  CAPTCHA_FAILED: 403,
  BANNED: 403,
  NOT_ADMITTED: 403,
  NOT_ELIGIBLE: 403,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  ALREADY_PURCHASED: 409,
  CONFLICT: 409,
  SALE_STARTED: 409,
  LIMIT_REACHED: 409,
  SOLD_OUT: 410,
  ENDED: 410,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  PAUSED: 423,
  NOT_STARTED: 425,
  RATE_LIMITED: 429,
  INTERNAL: 500,
  BUSY: 503,
  UNAVAILABLE: 503,
} as const satisfies Record<string, ContentfulStatusCode>;

export type ErrorCode = keyof typeof ERROR_STATUS;

const DEFAULT_MESSAGE: Partial<Record<ErrorCode, string>> = {
  SOLD_OUT: 'sold out',
  ENDED: 'the sale has ended',
  NOT_STARTED: 'the sale has not started yet',
  PAUSED: 'the sale is paused',
  ALREADY_PURCHASED: 'you already hold an order for this goods',
  LIMIT_REACHED: 'you already hold as many units as one shopper may',
  NOT_ELIGIBLE: 'this sale is open to invited shoppers only, and you are not on its list',
  TOKEN_INVALID: 'the purchase token is invalid, used or expired',
  RATE_LIMITED: 'too many requests',
  BUSY: 'the sale is busy, please retry',
  NOT_ADMITTED: 'this sale has a waiting room: join the queue and wait to be admitted',
  NOT_FOUND: 'not found',
  SALE_STARTED: 'the sale has started: this setting can no longer change',
  UNAUTHENTICATED: 'missing or invalid credentials',
  INVALID_SIGNATURE: 'the signature is missing or does not match the body',
  AMOUNT_MISMATCH: 'the amount does not match the payment',
};

/** The one error type routes throw; `app.onError` turns it into the contract's shape. */
declare global {
  interface ErrorConstructor {
    /** V8's frame count for stacks captured by new errors (workerd runs V8). */
    stackTraceLimit: number;
  }
}

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly status: ContentfulStatusCode;
  readonly headers: Record<string, string>;
  /** Fields the error body carries beside code, message and requestId (e.g. SOLD_OUT's `remaining`). */
  readonly details: Record<string, number> | undefined;

  constructor(code: ErrorCode, message?: string, headers: Record<string, string> = {}, details?: Record<string, number>) {
    // An AppError is an answer, not a fault: no stack to capture (a sold-out flood makes one
    // per request, and capturing the stack cost more than the rest of the answer).
    const stackTraceLimit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message ?? DEFAULT_MESSAGE[code] ?? code.toLowerCase().replaceAll('_', ' '));
    Error.stackTraceLimit = stackTraceLimit;
    this.name = 'AppError';
    this.code = code;
    this.status = ERROR_STATUS[code];
    this.headers = headers;
    this.details = details;
  }
}

/**
 * The contract's answer to a dependency that failed under the request (a Durable Object
 * restarting or overloaded, Postgres unreachable): 503 UNAVAILABLE, to be asked again in a second.
 */
export function unavailable(message: string): AppError {
  return new AppError('UNAVAILABLE', message, { 'retry-after': '1' });
}

/** The contract's error body. */
export function errorBody(code: ErrorCode, message: string, requestId: string, details?: Record<string, number>) {
  return { error: { code, message, requestId, ...details } };
}
