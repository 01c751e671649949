/*  fuzz_zmtp.c - libFuzzer target: any bytes as what a peer sends the
    ZMTP client (common/zmtp.c) over a real unix socket, then closes.

    The client connects to a listener this target holds, the target writes
    the input from the accepted side and closes it, and zmtp_recv takes
    messages until it reports the end: every input must end in an error
    (the peer is gone) after zero or more whole messages, without a crash,
    a leak or a hang; a message it returns has 1..ZMTP_MAX_FRAMES frames,
    none over the limit. Inputs are capped at 4 096 bytes (the socket
    buffer holds them without the client reading). Build and run:
    `make fuzz`. */
#include "common/zmtp.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int s_listener = -1;
static char s_path[108];

static void s_setup(void)
{
    char dir[] = "/tmp/jz-fuzz-zmtp-XXXXXX";
    if (!mkdtemp(dir))
        abort();
    snprintf(s_path, sizeof s_path, "%s/s.sock", dir);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, s_path, strlen(s_path) + 1);
    s_listener = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s_listener < 0 || bind(s_listener, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(s_listener, 4) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (s_listener < 0)
        s_setup();
    if (size > 4096)
        return 0;
    char err[256];
    zmtp_t *z = zmtp_new(s_path, err, sizeof err);
    if (!z)
        abort();
    int peer = accept(s_listener, NULL, NULL);
    if (peer < 0)
        abort();
    if (size && write(peer, data, size) != (ssize_t)size)
        abort();
    close(peer);
    const size_t limit = 1000;
    for (int i = 0; i < 10000; i++) {
        zmtp_msg m;
        int rc = zmtp_recv(z, &m, limit, 1000, err, sizeof err);
        if (rc == 1) {
            if (m.n < 1 || m.n > ZMTP_MAX_FRAMES)
                abort();
            for (size_t f = 0; f < m.n; f++)
                if (m.f[f].size > limit)
                    abort();
            zmtp_msg_fini(&m);
            continue;
        }
        if (rc == 0 || !err[0]) /* the peer closed: never a timeout */
            abort();
        break;
    }
    zmtp_destroy(&z);
    return 0;
}
