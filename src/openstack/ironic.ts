/**
 * Ironic (Bare Metal API v1): a node's power state, read and changed. Only what the power drivers
 * need (src/power/ironic.ts): hosts that are Ironic nodes are powered through Ironic, never behind
 * its back, so that Ironic's own view of the node stays true.
 */
import { type CallOptions, ServiceHttp, type Session, seg } from './http';

/**
 * The API version sent as `X-OpenStack-Ironic-API-Version`: 1.27 brings `soft power off` and the
 * power request's `timeout`; every Ironic since Ocata (2017) serves it. Ironic takes no
 * `OpenStack-API-Version` header, hence its own header below.
 */
export const IRONIC_API_VERSION = '1.27';

/** Ironic's power states as `GET /v1/nodes/{node}` shows them; null until a conductor has read the BMC. */
export type IronicPowerState = 'power on' | 'power off' | 'rebooting' | 'soft power off' | 'soft rebooting' | 'error' | null;

/** The targets `PUT /v1/nodes/{node}/states/power` takes (those leasekeeper uses). */
export type IronicPowerTarget = 'power on' | 'power off' | 'soft power off';

/** The fields of a node the power drivers read. */
export interface IronicNodePower {
  uuid: string;
  name: string | null;
  power_state: IronicPowerState;
  /** Set while a power change is under way (null once done). */
  target_power_state: IronicPowerState;
  /** The last failure of a conductor on the node (a power change that failed says why here). */
  last_error: string | null;
  maintenance: boolean;
  provision_state: string;
}

const POWER_FIELDS = ['uuid', 'name', 'power_state', 'target_power_state', 'last_error', 'maintenance', 'provision_state'];

export class IronicClient {
  readonly http: ServiceHttp;

  constructor(session: Session) {
    this.http = new ServiceHttp('baremetal', session, { versionPath: '/v1' });
  }

  private headers(): Record<string, string> {
    return { 'X-OpenStack-Ironic-API-Version': IRONIC_API_VERSION };
  }

  /** `GET /v1/nodes/{node}` (by UUID or name), only the power fields. */
  async getNodePower(node: string, options: CallOptions = {}): Promise<IronicNodePower> {
    return (await this.http.request<IronicNodePower>({ method: 'GET', path: `/nodes/${seg(node)}`, query: { fields: POWER_FIELDS.join(',') }, headers: this.headers(), ...options })).body;
  }

  /**
   * `PUT /v1/nodes/{node}/states/power`: Ironic accepts (202) and works in the background; the
   * node's `target_power_state` shows the change under way, `power_state` its end. A node locked by
   * another operation answers 409 (NodeLocked): try again later.
   */
  async setNodePower(node: string, target: IronicPowerTarget, options: CallOptions = {}): Promise<void> {
    await this.http.request<unknown>({ method: 'PUT', path: `/nodes/${seg(node)}/states/power`, body: { target }, headers: this.headers(), ...options });
  }
}
