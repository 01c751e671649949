/*  ins.h - the kinds of instruction a trial gets (docs/PROTOCOL.md,
    `instruction`): one enum for the schedulers (sched_instr.kind), the
    controller and the trial helper, and its one text, the wire's `kind`,
    turned to and from the enum only here (ins.c).

    The public helper header (trial_helper/jizhi.h) is installed alone and
    so spells the same values as jz_ins_kind (JZ_INS_SET == INS_SET, ...);
    trial_helper/jz_conn.c asserts at compile time that they agree.
*/
#ifndef JZ_INS_H
#define JZ_INS_H

typedef enum {
    INS_NONE = 0,   /* no instruction (an unknown kind reads as this) */
    INS_SET,        /* a parameter's new value */
    INS_STOP,       /* finish now */
    INS_PAUSE,      /* stop making progress until INS_RESUME */
    INS_RESUME,     /* continue after a pause */
    INS_CHECKPOINT, /* save a checkpoint now */
    INS_LOAD,       /* load a checkpoint (PBT exploit, guard rollback) */
    INS_COUNT
} ins_kind;

/* The wire's text of k ("set", "stop", ...); "" for INS_NONE or a value
   out of range. Static. */
const char *ins_kind_name(ins_kind k);
/* The kind a wire text names, or INS_NONE (NULL or unknown text). */
ins_kind ins_kind_parse(const char *text);

#endif
