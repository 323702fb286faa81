// One load generator for every phase of the bench: autocannon, same connection count, the
// outcome of every response counted by status and contract error code.
import autocannon from 'autocannon';
import { round } from '../load/metrics.ts';
import { workerCpuMs } from './process-cpu.ts';

/** One request of a phase: each call of `next()` is a new shopper. */
export type PhaseRequest = { method: 'GET' | 'POST'; path: string; headers: Record<string, string>; body?: string };

export type PhaseOptions = {
  url: string;
  connections: number;
  durationS: number;
  maxRequests?: number;
  /** A GET repeated... */
  path?: string;
  /** ...or the next request to send. */
  next?: () => PhaseRequest;
  onAnswer?: (status: number, body: string, req: PhaseRequest | undefined) => void;
  timeoutS?: number;
  /** Headers every request carries (a request's own headers win). */
  headers?: Record<string, string>;
};

export type PhaseResult = {
  requests: number;
  durationS: number;
  rps: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  meanMs: number;
  outcomes: Record<string, number>;
  errors: number;
  timeouts: number;
  /**
   * CPU time of the Worker's workerd processes per answered request, in µs (null off Linux):
   * what a request costs whatever else the machine runs, where req/s is what it sustains.
   */
  cpuUsPerRequest: number | null;
};

/** Status plus the contract's error code when the body has one: "202", "410 SOLD_OUT". */
function outcomeOf(status: number, body: string | undefined): string {
  if (status < 400) {
    return String(status);
  }
  const code = /"code":"([A-Z_]+)"/.exec(body ?? '')?.[1];
  return code ? `${status} ${code}` : String(status);
}

/**
 * Runs one phase. Either `path` (a GET repeated) or `next()` returning the next request
 * `{ method, path, headers, body }` (each call a new shopper), then `onAnswer(status, body, req)`.
 * Stops after `durationS`, or once `maxRequests` were sent.
 */
export function runPhase({
  url,
  connections,
  durationS,
  maxRequests,
  path,
  next,
  onAnswer,
  timeoutS = 10,
  headers = {},
}: PhaseOptions): Promise<PhaseResult> {
  const outcomes: Record<string, number> = {};
  const options: autocannon.Options = {
    url: url + (path ?? ''),
    connections,
    duration: durationS,
    timeout: timeoutS,
    headers,
    ...(maxRequests ? { maxOverallRequests: Math.max(maxRequests, connections) } : {}),
  };
  if (next) {
    // The request each connection sent last, by the connection's context.
    const sent = new WeakMap<object, PhaseRequest>();
    options.requests = [
      {
        setupRequest: (req, context) => {
          const r = next();
          sent.set(context, r);
          return { ...req, ...r, headers: { ...headers, ...r.headers } };
        },
        onResponse: (status, body, context) => {
          lastAnswerAt = performance.now();
          const outcome = outcomeOf(status, body);
          outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
          onAnswer?.(status, body, sent.get(context));
        },
      },
    ];
  }
  const cpuBefore = workerCpuMs();
  const startedAt = performance.now();
  let lastAnswerAt = startedAt;
  return new Promise((resolve, reject) => {
    autocannon(options, (error, result) => {
      const cpuAfter = workerCpuMs();
      if (error) {
        reject(error);
        return;
      }
      if (!next) {
        for (const [code, { count }] of Object.entries(result.statusCodeStats ?? {})) {
          outcomes[code] = count ?? 0;
        }
      }
      const completed = Object.values(outcomes).reduce((a, b) => a + b, 0);
      // autocannon notices that every request was sent only at its next one-second tick and
      // counts the phase until then: a phase that ran out of requests ends at its last answer.
      const ranOut = maxRequests !== undefined && completed >= maxRequests;
      const durationS = ranOut ? Math.min(result.duration, round((lastAnswerAt - startedAt) / 1000, 2)) : result.duration;
      const cpuMs = cpuBefore !== undefined && cpuAfter !== undefined ? cpuAfter - cpuBefore : undefined;
      resolve({
        requests: completed,
        durationS,
        rps: round(completed / durationS),
        p50Ms: result.latency.p50,
        p90Ms: result.latency.p90,
        p99Ms: result.latency.p99,
        maxMs: result.latency.max,
        meanMs: round(result.latency.average),
        outcomes,
        errors: result.errors,
        timeouts: result.timeouts,
        cpuUsPerRequest: cpuMs !== undefined && completed > 0 ? Math.round((cpuMs * 1000) / completed) : null,
      });
    });
  });
}

/**
 * Two runs of the same phase as one: requests, time, outcomes and CPU added up (req/s and CPU
 * per request over both), each latency percentile the slower of the two (percentiles do not add).
 * The floor is measured before and after the phases it is the floor of, so a machine whose speed
 * drifts between them moves the floor with them instead of skewing every ratio.
 */
export function combinePhases(a: PhaseResult, b: PhaseResult): PhaseResult {
  const requests = a.requests + b.requests;
  const durationS = a.durationS + b.durationS;
  const outcomes: Record<string, number> = { ...a.outcomes };
  for (const [k, v] of Object.entries(b.outcomes)) {
    outcomes[k] = (outcomes[k] ?? 0) + v;
  }
  const weighted = (x: number | null, y: number | null) =>
    x === null || y === null || requests === 0 ? null : Math.round((x * a.requests + y * b.requests) / requests);
  return {
    requests,
    durationS,
    rps: round(requests / Math.max(durationS, 0.001)),
    p50Ms: Math.max(a.p50Ms, b.p50Ms),
    p90Ms: Math.max(a.p90Ms, b.p90Ms),
    p99Ms: Math.max(a.p99Ms, b.p99Ms),
    maxMs: Math.max(a.maxMs, b.maxMs),
    meanMs: requests ? round((a.meanMs * a.requests + b.meanMs * b.requests) / requests) : 0,
    outcomes,
    errors: a.errors + b.errors,
    timeouts: a.timeouts + b.timeouts,
    cpuUsPerRequest: weighted(a.cpuUsPerRequest, b.cpuUsPerRequest),
  };
}
