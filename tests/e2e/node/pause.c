/* The node's sandbox ("pause") process and the program of the node scenarios' images
 * (tests/e2e/node.sh builds it with `gcc -static` and packs it as OCI images): it waits
 * for SIGTERM or SIGINT and exits 0. PID 1 of a container gets no default signal
 * handlers, so it must catch the signals itself to stop when the kubelet asks. */
#include <signal.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    for (;;)
        pause();
}
