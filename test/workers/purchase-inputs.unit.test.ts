// The purchase's inputs are read without zod when they are the common well-formed ones
// (validInto's `fast`): whatever such a reading returns must be what the schema returns, and
// everything it leaves alone goes to the schema, which keeps every refusal and its message.
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { USER_ID, UserId } from '../../workers/kernel/contract';
import {
  IdempotencyHeader,
  idempotencyHeaderFast,
  PurchaseBody,
  PurchasePathParam,
  purchaseBodyFast,
  purchasePathFast,
} from '../../workers/kernel/http-bodies';

const TOKEN = 'eyJ1IjoidS0xIn0.c2lnbmF0dXJl';
const PATH = `42.${'A'.repeat(30)}-_`;

const bodies: unknown[] = [
  { goodsId: 42, token: TOKEN },
  { goodsId: 42, token: TOKEN, quantity: 3 },
  { goodsId: 42, token: TOKEN, quantity: 100, extra: 'dropped' },
  { goodsId: Number.MAX_SAFE_INTEGER, token: 'x' },
  { goodsId: '42', token: TOKEN },
  { goodsId: 42, token: TOKEN, quantity: 0 },
  { goodsId: 42, token: TOKEN, quantity: 101 },
  { goodsId: 42, token: TOKEN, quantity: 1.5 },
  { goodsId: 42, token: TOKEN, quantity: '2' },
  { goodsId: 42, token: TOKEN, quantity: null },
  { goodsId: 0, token: TOKEN },
  { goodsId: -1, token: TOKEN },
  { goodsId: 4.2, token: TOKEN },
  { goodsId: Number.MAX_SAFE_INTEGER + 1, token: TOKEN },
  { goodsId: 42, token: '' },
  { goodsId: 42, token: 'x'.repeat(1025) },
  { goodsId: 42, token: 'x'.repeat(1024) },
  { goodsId: 42, token: 7 },
  { goodsId: 42 },
  { token: TOKEN },
  {},
  [],
  [42, TOKEN],
  null,
  'text',
  42,
  JSON.parse('{"__proto__": {"goodsId": 1}, "token": "t"}'),
];

const paths: unknown[] = [
  { path: PATH },
  { path: 'A'.repeat(32) },
  { path: `0.${'A'.repeat(32)}` },
  { path: `42.${'A'.repeat(31)}` },
  { path: `42.${'A'.repeat(31)}+` },
  { path: '' },
  {},
  { path: 42 },
];

const headers: unknown[] = [
  {},
  { 'idempotency-key': 'k-1' },
  { 'idempotency-key': '!~'.repeat(64) },
  { 'idempotency-key': 'x'.repeat(129) },
  { 'idempotency-key': '' },
  { 'idempotency-key': 'with space' },
  { 'idempotency-key': 'ключ' },
];

function holdsAgainst<T extends z.ZodType>(schema: T, fast: (value: unknown) => z.output<T> | undefined, inputs: unknown[]): number {
  let read = 0;
  for (const input of inputs) {
    const quick = fast(input);
    if (quick !== undefined) {
      read++;
      expect(quick, JSON.stringify(input)).toEqual(schema.parse(input));
    }
  }
  return read;
}

describe('the purchase inputs read without zod', () => {
  it('gives what PurchaseBody gives for the bodies it reads, and reads the ones a shopper page sends', () => {
    expect(holdsAgainst(PurchaseBody, purchaseBodyFast, bodies)).toBe(5);
    expect(purchaseBodyFast({ goodsId: 42, token: TOKEN })).toEqual({ goodsId: 42, token: TOKEN, quantity: 1 });
  });

  it('gives what PurchasePathParam and IdempotencyHeader give for the inputs they read', () => {
    expect(holdsAgainst(PurchasePathParam, purchasePathFast, paths)).toBe(2);
    expect(holdsAgainst(IdempotencyHeader, idempotencyHeaderFast, headers)).toBe(3);
  });

  it('never reads an input the schema refuses (random bodies)', () => {
    const values = [undefined, null, 0, 1, -1, 1.5, 100, 101, '', 'x', '1', true, [], {}, 2 ** 53, TOKEN];
    for (let i = 0; i < 2_000; i++) {
      const pick = () => values[Math.floor(Math.random() * values.length)];
      const body: Record<string, unknown> = {};
      for (const field of ['goodsId', 'token', 'quantity']) {
        const value = pick();
        if (value !== undefined || Math.random() < 0.5) {
          body[field] = value;
        }
      }
      const quick = purchaseBodyFast(body);
      if (quick !== undefined) {
        expect(quick, JSON.stringify(body)).toEqual(PurchaseBody.parse(body));
      }
    }
  });

  it('signs in exactly the subjects UserId takes (USER_ID, the one expression sign-in tests)', () => {
    const subjects = [
      'u-1',
      'user@example.com',
      'a:b.c_d-e',
      'x'.repeat(64),
      'x'.repeat(65),
      '',
      'with space',
      'u-1\n',
      '\nu-1',
      'ключ',
      'u/1',
      'u+1',
      'u%1',
      '9',
    ];
    for (const subject of subjects) {
      expect(USER_ID.test(subject), JSON.stringify(subject)).toBe(UserId.safeParse(subject).success);
    }
    expect(subjects.filter((s) => USER_ID.test(s))).toHaveLength(5);
  });
});
