/**
 * The resource types this build of leasekeeper supports. Each later resource type
 * (physical:host, virtual:server, network:bandwidth, …) is added to this list.
 */
import { pluginRegistry, type ResourcePlugin, type ResourcePlugins } from './plugin';

export function productionPlugins(): ResourcePlugins {
  const plugins: ResourcePlugin[] = [];
  return pluginRegistry(plugins);
}
