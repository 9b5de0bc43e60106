/** jest's global teardown (openstack project). */
export { stopServersWithRig as default } from '../../dev-stack/servers';
