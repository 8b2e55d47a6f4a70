"""The wire contract: subject names, Redis keys and message types (version 1)."""

from proto.codec import DecodeError, decode, encode
from proto.keys import Keys
from proto.subjects import Subjects

__all__ = ["DecodeError", "Keys", "Subjects", "decode", "encode"]
