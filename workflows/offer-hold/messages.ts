/** What the API and the worker know of an offer hold's workflow: its input, id, type name and messages. */
import { defineSignal, defineUpdate } from '@temporalio/workflow';
import type { Lease } from '../../src/domain/lease';

export interface OfferHoldInput {
  /** The hold's id: the lease_id of its bookings, and the id of the lease an accept records. */
  holdId: string;
  offerId: string;
  /** When the hold ends by itself (ms since the epoch). */
  expiresAtMs: number;
  /**
   * Set when the workflow places the hold itself (placeOfferHold): an offer with a type that books
   * in the worker (its reserve may call the cloud), or any offer while Blazar's external filter is
   * configured. Unset: the API booked and recorded the hold before starting the workflow.
   */
  placement?: OfferHoldPlacement;
}

export interface OfferHoldPlacement {
  /** The lease the hold would become, under the hold's id, its reservations not booked yet. */
  draft: Lease;
  byAdmin: boolean;
  /** The offer is kept until then (past the hold, for an accept after its expiry). */
  keepOfferUntilMs: number;
  /** The API stops waiting then (LK_API_WORKFLOW_TIMEOUT_MS): a placement not done by then is undone. */
  placeByMs: number;
}

/** `refused`/`not-placed`: a hold its workflow was to place never held. */
export type OfferHoldOutcome = 'expired' | 'ended' | 'refused' | 'not-placed';

export type OfferHoldWorkflow = (input: OfferHoldInput) => Promise<OfferHoldOutcome>;
export const offerHoldWorkflowType = 'offerHoldWorkflow';
export const offerHoldWorkflowId = (holdId: string) => `offer-hold-${holdId}`;

/** The hold was released or accepted (the API did it in the database), or its caller gave up: the workflow has nothing left to wait for. */
export const offerHoldEnded = defineSignal('offerHoldEnded');

/** Books the offer's reservations and records the hold (Update-with-Start); answers the lease as held, or fails as a create would (409 + reason, 403 policy). */
export const placeOfferHold = defineUpdate<Lease, []>('placeOfferHold');
