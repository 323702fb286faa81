/**
 * Resolves after `ms` on this request's own timer. Waiting on one's own timer is how a request
 * polls shared isolate state: workerd cancels a request that awaits a promise another request
 * settles. Imports nothing, so the page bundles it too.
 */
export function sleep(ms: number): Promise<void> {
  return new Promise<void>((resolve) => setTimeout(resolve, ms));
}
