import type { Limits } from '../kernel/limits';
import { banPolicy, checkLocalBans } from './client-guard';
import type { WaitUntil } from './group-commit';
import { limiter, scheduleGuardReport } from './guard-reports';

// The purchase route answers a closed or sold-out sale before the limits (so the flood after a
// sell-out costs no object call), which used to mean that hammering it never counted toward a
// ban. Each such answer is counted in the isolate and goes to the client keys' guard shards with
// the isolate's background accounting (see guard-reports.ts), where it counts toward the ban
// like any other request: a client
// hammering a closed sale is banned like any other, and its answers still cost no object call.

/**
 * Before an answer from the isolate's copies: refuses a client already known to be banned, then
 * counts the answer for `ids` (the client's address key, and its shopper key once signed in)
 * and makes sure a report goes out. Never waits on the report.
 */
export function countEarlyAnswer(env: Env, ids: string[], limits: Limits, waitUntil: WaitUntil | undefined, now = Date.now()): void {
  if (ids.length === 0) {
    return;
  }
  checkLocalBans(env, ids, waitUntil, now);
  limiter.countAnswered(ids);
  scheduleGuardReport(env, banPolicy(limits), waitUntil, now);
}
