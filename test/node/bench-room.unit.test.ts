// The bench's measure of the waiting room's admission rate (scripts/lib/bench/room.ts): it reads
// the room's pace only while the room had a line to take from, not the joins' pace.
import { describe, expect, it } from 'vitest';
import { etaError, etaErrorByTenth, rateWhileQueued } from '../../scripts/lib/bench/room.ts';

/** `n` shoppers joining `perSecond` a second from `from` (ms). */
function joins(n: number, perSecond: number, from = 0): number[] {
  return Array.from({ length: n }, (_, i) => from + Math.floor((i * 1_000) / perSecond));
}

/** A room that admits `perRound` shoppers every `everyMs`, from `from`, in join order, never one who joined less than 2.25 s earlier. */
function rounds(joined: number[], perRound: number, everyMs: number, from: number): number[] {
  const admitted: number[] = [];
  for (let t = from; admitted.length < joined.length; t += everyMs) {
    for (let k = 0; k < perRound && admitted.length < joined.length && (joined[admitted.length] ?? 0) <= t - 2_250; k++) {
      admitted.push(t);
    }
  }
  return admitted;
}

describe('the admission rate while queued', () => {
  it('reads a room of 200 a second as 200, and one that decides every 1.3 s with a one-second bucket as 154', () => {
    const joined = joins(4_000, 300);
    const onTime = rateWhileQueued(joined, rounds(joined, 200, 1_000, 3_000), 200);
    expect(onTime.seconds).toBeGreaterThan(10);
    expect(onTime.perSecond).toBeGreaterThanOrEqual(190);
    expect(onTime.perSecond).toBeLessThanOrEqual(210);
    const late = rateWhileQueued(joined, rounds(joined, 200, 1_300, 3_000), 200);
    expect(late.perSecond).toBeGreaterThanOrEqual(145);
    expect(late.perSecond).toBeLessThanOrEqual(165);
  });

  it('reads nothing when the joins set the pace: a line that never held two seconds of the rate', () => {
    // Joins at 290 a second against a room of 500: whoever is known is let in at the next round.
    const joined = joins(2_000, 290);
    expect(rateWhileQueued(joined, rounds(joined, 500, 1_000, 3_000), 500)).toEqual({ perSecond: null, seconds: 0 });
    expect(rateWhileQueued([], [], 500)).toEqual({ perSecond: null, seconds: 0 });
  });
});

describe('the ETA error along the line', () => {
  it('says which tenth of the line, in join order, was let in later or earlier than promised', () => {
    // 100 shoppers a second for 10 s, promised their place at 10 a second plus 2 s. The first
    // tenth is let in 2 s late (a slow start), the rest as promised but the last tenth 1 s early.
    const shoppers = Array.from({ length: 1_000 }, (_, i) => {
      const joinedAt = i * 10;
      const etaS = 2 + i / 10;
      const late = i < 100 ? 2 : i >= 900 ? -1 : 0;
      return { joinedAt, etaS, admittedAt: joinedAt + (etaS + late) * 1000 };
    });
    // Listed in admission order, not join order: the measure sorts them.
    const byTenth = etaErrorByTenth([...shoppers].reverse());
    expect(byTenth).toEqual([2, 0, 0, 0, 0, 0, 0, 0, 0, -1]);
    expect(etaErrorByTenth(shoppers.slice(0, 9))).toEqual([]);
  });

  it("counts a promise from the join's answer, the moment the shopper read the ETA", () => {
    // Joined at 0, answered 400 ms later with 3 s, let in at 3.4 s: on time, not 0.4 s late.
    expect(etaError({ joinedAt: 0, toldAt: 400, etaS: 3, admittedAt: 3_400 })).toBe(0);
    expect(
      etaErrorByTenth(Array.from({ length: 10 }, (_, i) => ({ joinedAt: i, toldAt: i + 400, etaS: 3, admittedAt: i + 3_400 }))),
    ).toEqual(Array.from({ length: 10 }, () => 0));
    // A shopper whose answer was not seen (a result saved before) counts from the request.
    expect(etaError({ joinedAt: 0, etaS: 3, admittedAt: 3_400 })).toBeCloseTo(0.4);
  });
});
