/** jest's global teardown (core project). */
export { stopServers as default } from '../dev-stack/servers';
