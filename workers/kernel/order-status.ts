// The order status codes of the seed and the contract's names for them.

/** Order status codes, as in the seed: 0 pending, 1 paid, 2 cancelled, 3 closed on timeout, 4 refunded. */
export const ORDER_STATUS = {
  PENDING_PAYMENT: 0,
  PAID: 1,
  CANCELLED: 2,
  CLOSED_TIMEOUT: 3,
  REFUNDED: 4,
} as const;
export type OrderStatusName = keyof typeof ORDER_STATUS;

const STATUS_NAME = new Map<number, OrderStatusName>(Object.entries(ORDER_STATUS).map(([name, code]) => [code, name as OrderStatusName]));

/** The contract's name of an order status code, or undefined for a code this build does not know. */
export function knownStatusName(code: number): OrderStatusName | undefined {
  return STATUS_NAME.get(code);
}

/** The contract's name of an order status code; throws for an unknown one. */
export function orderStatusName(code: number): OrderStatusName {
  const name = STATUS_NAME.get(code);
  if (!name) {
    throw new Error(`order status ${code} is unknown`);
  }
  return name;
}
