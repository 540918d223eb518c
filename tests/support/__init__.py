"""What the tests of several capabilities share: waiting on a condition (``wait``), test bookies
(``bookies``), test storages' configuration (``storage``), small disks (``disks``), free ports
and probes of them (``ports``), the session's ZooKeeper (``zookeeper``), the S3-compatible
server of the object-storage tests (``s3server``) and hand-packed V2 frames (``v2_wire``).

Owns test support only; must never hold a test, nor import a capability folder's helpers.
"""
