"""Spark's Utils.unpack, for SparkContext.addArchive: an archive's contents land in a
directory of its own, never outside it (zipfile drops absolute and ".." parts; tarfile's
"data" filter refuses links out, devices and absolute names), and appear whole or not at
all (unpacked beside the destination, then renamed into place)."""
from __future__ import annotations

import logging
import os
import shutil
import tarfile
import uuid
import zipfile

from ember.util.files import unlink_quietly

log = logging.getLogger(__name__)

_ZIP = (".zip", ".jar")
_TAR = (".tar.gz", ".tgz", ".tar")


def unpack(source: str, dest: str) -> None:
    """Unpack `source` (.zip, .jar, .tar.gz, .tgz, .tar) into the new directory `dest`; a
    file of another kind is copied to `dest` as it is, as Spark does."""
    lower = source.lower()
    tmp = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.{uuid.uuid4().hex}")
    try:
        if lower.endswith(_ZIP):
            with zipfile.ZipFile(source) as z:
                z.extractall(tmp)
        elif lower.endswith(_TAR):
            with tarfile.open(source) as t:
                t.extractall(tmp, filter="data")
        else:
            log.warning("Cannot unpack %s, just copying it to %s.", source, dest)
            shutil.copyfile(source, tmp)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            unlink_quietly(tmp)
        raise
