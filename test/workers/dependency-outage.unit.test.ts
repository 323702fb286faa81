// Which failures are a dependency's outage (503 UNAVAILABLE) and which stay the request's or a
// bug: db/outage.ts for Postgres, workers/edge/object-unavailable.ts for workerd's marks.
import { NeonDbError } from '@neondatabase/serverless';
import { DrizzleQueryError } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { PostgresConnectError, postgresUnavailable } from '../../db/outage';
import { markedUnavailable } from '../../workers/edge/object-unavailable';

/** A server's error as the pool's driver raises it: a message and its SQLSTATE. */
function serverError(code: string): Error {
  return Object.assign(new Error(`server said ${code}`), { code, severity: 'ERROR' });
}

const query = (cause: unknown) => new DrizzleQueryError('select 1', [], cause as Error);

function neonError(code: string | undefined): NeonDbError {
  const e = new NeonDbError('over HTTP');
  e.code = code;
  return e;
}

describe('postgresUnavailable', () => {
  it('takes a connection or server failure for an outage', () => {
    for (const code of ['08000', '08001', '08006', '53300', '53100', '57P01', '57P02', '57P03']) {
      expect(postgresUnavailable(query(serverError(code))), code).toBe(true);
    }
    expect(postgresUnavailable(query(new Error('Connection terminated unexpectedly')))).toBe(true);
    // The WebSocket's failure on workerd: an ErrorEvent, no Error and no SQLSTATE.
    expect(postgresUnavailable(query({ type: 'error', message: 'Network connection lost.' }))).toBe(true);
    expect(postgresUnavailable(query(neonError('')))).toBe(true);
    expect(postgresUnavailable(neonError(undefined))).toBe(true);
    expect(postgresUnavailable(new PostgresConnectError(new Error('Connection terminated unexpectedly')))).toBe(true);
  });

  it("leaves a statement's own failure as it was", () => {
    for (const code of ['23505', '23503', '40001', '40P01', '22012', '42P01', '57014', '28P01', '3D000']) {
      expect(postgresUnavailable(query(serverError(code))), code).toBe(false);
      expect(postgresUnavailable(query(neonError(code))), code).toBe(false);
    }
    // A wrong password on connect is a configuration fault, not an outage.
    expect(postgresUnavailable(new PostgresConnectError(serverError('28P01')))).toBe(false);
  });

  it('leaves a bug a bug: a JavaScript fault inside the driver call, or any error that did not come from it', () => {
    expect(postgresUnavailable(query(new TypeError('Do not know how to serialize a BigInt')))).toBe(false);
    expect(postgresUnavailable(query(new RangeError('Invalid time value')))).toBe(false);
    expect(postgresUnavailable(new TypeError("Cannot read properties of undefined (reading 'id')"))).toBe(false);
    expect(postgresUnavailable(new Error('Connection terminated unexpectedly'))).toBe(false);
    expect(postgresUnavailable(serverError('08006'))).toBe(false);
    expect(postgresUnavailable(undefined)).toBe(false);
  });
});

describe('markedUnavailable', () => {
  it("takes workerd's marks of a reset, an overload or a transient fault for an outage", () => {
    expect(markedUnavailable(Object.assign(new Error('reset'), { durableObjectReset: true }))).toBe(true);
    expect(markedUnavailable(Object.assign(new Error('busy'), { overloaded: true }))).toBe(true);
    expect(markedUnavailable(Object.assign(new Error('Network connection lost.'), { retryable: true, remote: true }))).toBe(true);
  });

  it("leaves the object's own error and any unmarked one to the error handler's 500", () => {
    expect(markedUnavailable(Object.assign(new TypeError('x is null'), { remote: true }))).toBe(false);
    expect(markedUnavailable(new Error('internal error'))).toBe(false);
    expect(markedUnavailable(Object.assign(new Error('flag of another kind'), { retryable: 'yes' }))).toBe(false);
    expect(markedUnavailable(null)).toBe(false);
  });
});
