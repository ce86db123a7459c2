# The kiln server image. No base image can be pulled where kiln is built and
# tested, so it starts FROM scratch with a root filesystem kiln writes
# itself: the static kiln binary, busybox (Debian's busybox-static) and git
# with the libraries ldd lists — the same files as the docker scalers'
# agent image. Build it with scripts/image, which writes rootfs.tar next to
# a copy of this file; `docker build .` alone has no rootfs.tar.
#
# The server runs no local agents here (KILN_LOCAL_AGENTS=0): local agents
# would run jobs inside this container, with only busybox's shell and git
# for tools. Run agents elsewhere (`kiln agent`, or a scaler) and point them
# at the server. The SQLite database, step logs and artifacts live in
# /var/lib/kiln: mount a volume there, or set KILN_DATABASE to PostgreSQL
# and storage to S3.
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
    KILN_LISTEN=0.0.0.0:4000 \
    KILN_DATA_DIR=/var/lib/kiln \
    KILN_LOCAL_AGENTS=0
VOLUME /var/lib/kiln
EXPOSE 4000
ENTRYPOINT ["/usr/local/bin/kiln"]
CMD ["server"]
