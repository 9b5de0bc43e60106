/** jest's global setup (core project): the servers of dev-stack/servers.ts. */
export { startServers as default } from '../dev-stack/servers';
