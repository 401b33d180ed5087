"""Patroni 3.0.2's etcd3 heartbeat must never overwrite another member's
leader key.

A leader whose lease expired (its process frozen past the ttl, say) grants
itself a new lease on its next heartbeat. Debian's Patroni 3.0.2 then puts
the leader key unconditionally: a thawed former primary, whose cached view
still names it the leader, takes the lock back from the standby promoted
meanwhile. That standby demotes, is rewound, and every commit acknowledged
on it is lost (deploy/images/patroni/README.md, "The leader-key patch").

The fix is upstream's (patroni/patroni#2689 and #2693, in 3.0.3): keep the
key while it names this member, else create it only where none exists, and
report a heartbeat that did neither as a lost lock, so Patroni demotes.

Run at image build; it fails the build when the code it replaces is not
found, so a Debian update that changes the file is looked at again.
"""

import pathlib
import py_compile
import sys

import patroni.dcs.etcd3 as etcd3

OLD = """                try:
                    self._run_and_handle_exceptions(self._client.put, self.leader_path,
                                                    self._name, self._lease, retry=_retry)
                except ReturnFalseException:
                    pass
        return bool(self._lease)
"""

NEW = """                # ordertimeout: keep the key while it names us, else create
                # it only where none exists; never overwrite another
                # member's (upstream patroni/patroni#2689, #2693).
                fields = {'key': base64_encode(self.leader_path),
                          'value': base64_encode(self._name), 'lease': self._lease}
                request_put = {'request_put': fields}
                ours = {'key': fields['key'], 'target': 'VALUE', 'value': fields['value']}
                absent = {'key': fields['key'], 'target': 'CREATE', 'create_revision': '0'}
                ret = self._run_and_handle_exceptions(
                    self._client.call_rpc, '/kv/txn',
                    {'compare': [ours], 'success': [request_put],
                     'failure': [{'request_txn': {'compare': [absent], 'success': [request_put]}}]},
                    retry=_retry)
                return bool(ret.get('succeeded') or
                            (ret.get('responses') or [{}])[0].get('response_txn', {}).get('succeeded'))
        return bool(self._lease)
"""

path = pathlib.Path(etcd3.__file__)
src = path.read_text()
if NEW in src:
    sys.exit(0)
if src.count(OLD) != 1:
    sys.exit(f"{path}: the leader heartbeat to patch is not found once; Patroni changed, look again")
path.write_text(src.replace(OLD, NEW))
py_compile.compile(str(path), doraise=True)
print(f"patched {path}: the leader heartbeat never overwrites another member's key")
