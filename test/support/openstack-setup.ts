/** jest's global setup (openstack project): the core servers plus the loopback OpenStack rig (dev-stack/servers.ts). */
export { startServersWithRig as default } from '../../dev-stack/servers';
