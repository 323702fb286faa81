// What a phase's requests were answered, counted as the run goes: outcomes by kind of request,
// the accepted purchases (and what their result polls said), 5xx, hostile requests let through,
// retries with the same Idempotency-Key answered differently.
import { read } from '../load/contract.ts';
import { type Answer, outcomeKey } from '../load/http-client.ts';
import { allowed503, sameAnswer } from '../load/replay.ts';
import { type LineCounts, lineCounts } from './line.ts';

/** Who sent a request: an honest buyer, a latecomer, an accepted shopper trying again, a lost-answer retry, a hostile client, a result poll. */
export type Category = 'buyer' | 'latecomer' | 'again' | 'retry' | 'hostile' | 'poll';
export const CATEGORIES: readonly Category[] = ['buyer', 'latecomer', 'again', 'retry', 'hostile', 'poll'];

export type ResultStatus = 'QUEUED' | 'SUCCESS' | 'FAIL';

/** A purchase answered 202, and the latest its result said. */
export type Accepted = {
  requestId: string;
  userId: string;
  jwt: string;
  ip: string;
  token: string;
  path: string;
  status: ResultStatus;
  orderId?: string | undefined;
  reason?: string | undefined;
};

/** The plain numbers of a tally, for the verdict. */
export type TallySummary = {
  requests: number;
  outcomes: Record<Category, Record<string, number>>;
  accepted: { requestId: string; userId: string; status: ResultStatus | 'UNKNOWN'; orderId?: string | undefined }[];
  fiveXX: number;
  busy: number;
  noAnswer: number;
  hostile: { sent: number; refused: number; letThrough: number; examples: string[] };
  idempotency: { compared: number; mismatches: number; examples: string[] };
  fiveXXExamples: string[];
  noAnswerExamples: string[];
  /** How shoppers waited in a phase's waiting room (all zero without one). */
  line: LineCounts;
};

export class PhaseTally {
  requests = 0;
  readonly outcomes = Object.fromEntries(CATEGORIES.map((c) => [c, {}])) as Record<Category, Record<string, number>>;
  readonly accepted = new Map<string, Accepted>();
  fiveXX = 0;
  busy = 0;
  noAnswer = 0;
  readonly fiveXXExamples: string[] = [];
  readonly noAnswerExamples: string[] = [];
  /** When the first requests without an answer failed (epoch ms): the run prints the stack's lines around them. */
  readonly noAnswerAt: number[] = [];
  readonly hostile = { sent: 0, refused: 0, letThrough: 0, examples: [] as string[] };
  readonly idempotency = { compared: 0, mismatches: 0, examples: [] as string[] };
  readonly line = lineCounts();
  /** Result reads answered after a second or more: held by the stock shard for the order to be written. */
  heldReads = 0;

  /** Counts one answer. */
  record(category: Category, what: string, answer: Answer): void {
    this.requests++;
    const key = outcomeKey(answer);
    const counts = this.outcomes[category];
    counts[key] = (counts[key] ?? 0) + 1;
    if (answer.status === 0) {
      this.noAnswer++;
      const f = answer.failure;
      if (f && this.noAnswerAt.length < 20) {
        this.noAnswerAt.push(f.at);
      }
      if (this.noAnswerExamples.length < 5) {
        const where = f ? ` (${clock(f.at)}, ${f.connection} connection${f.message ? `, "${f.message}"` : ''})` : '';
        this.noAnswerExamples.push(`${what}: ${answer.error ?? 'no answer'} after ${Math.round(answer.ms)} ms${where}`);
      }
    } else if (allowed503(answer)) {
      this.busy++;
    } else if (answer.status >= 500) {
      this.fiveXX++;
      if (this.fiveXXExamples.length < 5) {
        this.fiveXXExamples.push(`${what}: ${key} ${answer.body.slice(0, 160)}`);
      }
    }
  }

  /** Counts a hostile request's answer: it must be refused (a 4xx; an allowed 503 is a retry, not a pass). */
  recordHostile(kind: string, answer: Answer): void {
    this.record('hostile', kind, answer);
    this.hostile.sent++;
    if (answer.status >= 400 && answer.status < 500) {
      this.hostile.refused++;
    } else if (answer.status >= 200 && answer.status < 300) {
      this.noteLetThrough(`${kind}: ${outcomeKey(answer)}`);
    }
  }

  noteLetThrough(example: string): void {
    this.hostile.letThrough++;
    if (this.hostile.examples.length < 5) {
      this.hostile.examples.push(example);
    }
  }

  /** Compares a lost-answer retry with the first answer. */
  compareRetry(first: Answer, again: Answer): void {
    const same = sameAnswer(first, again);
    if (same === undefined) {
      return;
    }
    this.idempotency.compared++;
    if (!same) {
      this.idempotency.mismatches++;
      if (this.idempotency.examples.length < 5) {
        this.idempotency.examples.push(`${outcomeKey(first)} then ${outcomeKey(again)}`);
      }
    }
  }

  /** Notes a 202; returns the entry when it is new. */
  accept(answer: Answer, who: { userId: string; jwt: string; ip: string; token: string; path: string }): Accepted | undefined {
    const requestId = answer.status === 202 ? read.queued(answer.json)?.requestId : undefined;
    if (requestId === undefined || this.accepted.has(requestId)) {
      return undefined;
    }
    const entry: Accepted = { requestId, ...who, status: 'QUEUED' };
    this.accepted.set(requestId, entry);
    return entry;
  }

  summary(finalStatus: (a: Accepted) => { status: ResultStatus | 'UNKNOWN'; orderId?: string | undefined }): TallySummary {
    return {
      requests: this.requests,
      outcomes: structuredClone(this.outcomes),
      accepted: [...this.accepted.values()].map((a) => ({ requestId: a.requestId, userId: a.userId, ...finalStatus(a) })),
      fiveXX: this.fiveXX,
      busy: this.busy,
      noAnswer: this.noAnswer,
      hostile: structuredClone(this.hostile),
      idempotency: structuredClone(this.idempotency),
      fiveXXExamples: [...this.fiveXXExamples],
      noAnswerExamples: [...this.noAnswerExamples],
      line: { ...this.line },
    };
  }
}

/** 19:52:01.123 (UTC), as the verbose lines are stamped. */
export function clock(at: number): string {
  return new Date(at).toISOString().slice(11, 23);
}
