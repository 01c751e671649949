/*  keys.h - CURVE key pairs on disk and the socket options that use them.

    A key pair is two Z85 texts of 40 characters (ZeroMQ's encoding of a
    32-byte Curve25519 key). On disk, in the key directory ($JIZHI_HOME if
    set, else ~/.config/jizhi; created 0700):

      NAME.key   "public <z85>\nsecret <z85>\n", mode 0600
      NAME.pub   "<z85>\n", mode 0600 (the public half, to hand out)

    The controller's pair is `controller`, a client's `client` by default.

    Client side (CLI, web, dispatcher, trial helper) over tcp:// only:
      JIZHI_SERVER_KEY  the controller's public key: Z85 text or a file
                        (.pub or .key); default KEYDIR/controller.pub if it
                        exists. "none": plain TCP (an --insecure controller;
                        what the commands' --insecure sets). Without any of
                        these a tcp:// endpoint is refused, with a message
                        that says where to get the key: never a silent
                        fallback to plain TCP.
      JIZHI_SERVER_KEY_FROM  where JIZHI_SERVER_KEY's value came from, for
                        the messages about it: "--server-key" when the
                        commands' flag set it (cli/main.c), else unset.
      JIZHI_KEY         the client's own pair (a .key file); default
                        KEYDIR/client.key if it exists, else a fresh pair
                        made for this connection (anonymous: good enough
                        for trials, whose token is their identity).

    No global state; thread-safe. Errors are returned as text in err.
*/
#ifndef JZ_KEYS_H
#define JZ_KEYS_H

#include <stddef.h>

#define KEYS_Z85_LEN 40

typedef struct {
    char pub[KEYS_Z85_LEN + 1];
    char sec[KEYS_Z85_LEN + 1];
} keys_pair;

/* 1 when `s` is exactly a 40-character Z85 text that decodes to 32 bytes. */
int keys_valid_z85(const char *s);

/* The key directory into out: $JIZHI_HOME, else $HOME/.config/jizhi.
   0, or -1 when neither is set or it does not fit. Creates nothing. */
int keys_dir(char *out, size_t size);

/* A fresh random pair. 0, or -1 when this libzmq has no CURVE. */
int keys_generate(keys_pair *kp);

/* Writes DIR/NAME.key (0600) and DIR/NAME.pub (0600), creating DIR (0700)
   when missing. Refuses to replace an existing NAME.key unless `force`.
   0, or -1 with err. */
int keys_write(const char *dir, const char *name, const keys_pair *kp, int force,
               char *err, size_t errsize);

/* Reads a NAME.key file. 0, or -1 with err naming the file and what is
   wrong (missing, unreadable, mode open to others, bad key). */
int keys_read_pair(const char *path, keys_pair *kp, char *err, size_t errsize);

/* A public key from `text`: a Z85 key itself, or a file whose first
   "public" line (a .key) or first line (a .pub) is one. 0 or -1 with err. */
int keys_read_public(const char *text, char out[KEYS_Z85_LEN + 1], char *err,
                     size_t errsize);

/* Client side: the controller's public key for `endpoint` by the rules
   above, into server_pub: "" for ipc:// and inproc:// (left as they are)
   and for plain TCP chosen with JIZHI_SERVER_KEY=none. 0, or -1 with err
   (a key named but unreadable; a tcp:// endpoint with no key and no
   "none": the err says how to get the key). Creates nothing. */
int keys_client_server_key(const char *endpoint, char server_pub[KEYS_Z85_LEN + 1],
                           char *err, size_t errsize);

/* Client side: makes `sock` (not yet connected) a CURVE client of the
   controller at `endpoint` when it is tcp:// (keys_client_server_key;
   refused without a key unless plain TCP was chosen); ipc:// and
   inproc:// are left as they are. When server_pub is not NULL it
   receives the server key used ("" if none). 0, or -1 with err. */
int keys_client_setup(void *sock, const char *endpoint, char *server_pub, char *err,
                      size_t errsize);

/* The client key pair keys_client_setup uses: JIZHI_KEY's path, else
   KEYDIR/client.key when it exists, written into `path`; "" when the
   client speaks with a fresh anonymous pair (JIZHI_KEY=anonymous, or no
   key). Returns path. */
const char *keys_client_key_path(char *path, size_t size);

#endif
