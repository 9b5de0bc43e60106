/** What the API and the worker know of an offer hold's workflow: its input, id, type name and signal. */
import { defineSignal } from '@temporalio/workflow';

export interface OfferHoldInput {
  /** The hold's id: the lease_id of its bookings, and the id of the lease an accept records. */
  holdId: string;
  offerId: string;
  /** When the hold ends by itself (ms since the epoch). */
  expiresAtMs: number;
}

export type OfferHoldOutcome = 'expired' | 'ended';

export type OfferHoldWorkflow = (input: OfferHoldInput) => Promise<OfferHoldOutcome>;
export const offerHoldWorkflowType = 'offerHoldWorkflow';
export const offerHoldWorkflowId = (holdId: string) => `offer-hold-${holdId}`;

/** The hold was released or accepted (the API did it in the database): the workflow has nothing left to wait for. */
export const offerHoldEnded = defineSignal('offerHoldEnded');
