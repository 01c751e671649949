/*  c-objective.c - a trial written in C against the installed helper:

        cc -o c-objective examples/c-objective.c $(pkg-config --cflags --libs jizhi)

    Minimises a bowl over `x` and `y`, reporting `score` every step and
    following live changes of `x`. Runs standalone outside a study.
*/
#include <jizhi.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
    jz_trial *t = jz_open();
    if (!t)
        return 1;
    double x = jz_param_double(t, "x", 0.0);
    double y = jz_param_double(t, "y", 0.0);
    for (long step = 1; step <= 5; step++) {
        jz_instruction ins;
        while (jz_poll(t, &ins) > 0) {
            int applied = ins.kind == JZ_INS_SET && !strcmp(ins.name, "x");
            if (applied)
                x = ins.value;
            jz_ack(t, &ins, applied, applied ? NULL : "only x can change");
        }
        double score = 1.0 - (x - 0.3) * (x - 0.3) - (y + 0.2) * (y + 0.2);
        jz_report(t, step, "score", score);
    }
    printf("score %g\n", 1.0 - (x - 0.3) * (x - 0.3) - (y + 0.2) * (y + 0.2));
    jz_flush(t, 5000);
    jz_close(&t);
    return 0;
}
