"""Multi-host on one machine: hosts as network namespaces, and a stack spread over them.

- :mod:`greenserve.multihost.fabric`: the hosts (namespaces, veth pairs, one bridge), a
  partition and its heal, optional ``tc netem`` delay; made and removed by a context
  manager;
- :mod:`greenserve.multihost.stack`: the NATS cluster, the Redis primary, replica and
  Sentinels, and every service process placed on those hosts.

``greenserve bench faults --multihost`` and ``greenserve bench control-plane --multihost``
run on them (``docs/deploy.md``, Multi-host on one machine).
"""
