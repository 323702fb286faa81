import { NeonDbError } from '@neondatabase/serverless';
import { DrizzleQueryError } from 'drizzle-orm';

// Which Postgres failures are an outage (the server or the way to it is gone for now) rather
// than a statement's failure. What the Neon driver throws, seen in workerd with the database
// unreachable: over HTTP, Drizzle's DrizzleQueryError around a NeonDbError whose `code` is empty
// (the endpoint could not reach the server) or that wraps the failed fetch; over the pool, a
// DrizzleQueryError around the socket's failure ("Connection terminated unexpectedly", or the
// WebSocket's ErrorEvent), and for a transaction's connect, which Drizzle does not wrap, that
// failure itself (withDb makes it a PostgresConnectError). A server that is there answers with
// an SQLSTATE: classes 08 (connection exception) and 53 (insufficient resources), and 57P01-03
// (shutting down, crashed, cannot connect now) are outages too; any other (23505, 40001, ...) is
// the statement's, handled as before.

/** SQLSTATEs of class 57 (operator intervention) that mean the server is going or not there yet. */
const SERVER_GOING = new Set(['57P01', '57P02', '57P03']);

/** A pool connection that could not be opened (what the socket threw is its cause). */
export class PostgresConnectError extends Error {
  constructor(cause: unknown) {
    // An Error, or an ErrorEvent (no Error, but with a message).
    const reason = typeof cause === 'object' && cause !== null && 'message' in cause ? String(cause.message) : String(cause);
    super(`could not connect to Postgres: ${reason}`, { cause });
    this.name = 'PostgresConnectError';
  }
}

/** The SQLSTATE an error of the driver carries, if any (the HTTP driver leaves `code` empty without one). */
function sqlState(error: unknown): string | undefined {
  const code = typeof error === 'object' && error !== null && 'code' in error ? error.code : undefined;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** Whether `error` says Postgres could not be had: a failure of the connection or the server, not of the statement. */
export function postgresUnavailable(error: unknown): boolean {
  const fromDriver =
    error instanceof DrizzleQueryError || error instanceof PostgresConnectError
      ? error.cause
      : error instanceof NeonDbError
        ? error
        : undefined;
  // A JavaScript fault inside the driver call (a value it cannot serialise) is a bug, not an outage.
  if (fromDriver === undefined || fromDriver instanceof TypeError || fromDriver instanceof RangeError) {
    return false;
  }
  const state = sqlState(fromDriver);
  return state === undefined || state.startsWith('08') || state.startsWith('53') || SERVER_GOING.has(state);
}
