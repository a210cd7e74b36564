import json, random
random.seed(11)
t0=1700000000000
LABEL="calibrated-by-station-7;" * 170
for r in range(22):
  out=open('in%02d.jsonl'%r,'w')
  for i in range(r*64,(r+1)*64):
    for d in range(4):
        for s,kind in [("temp","f"),("count","i"),("state","s"),("door","b"),("label","l")]:
            ts=t0+i*1000+d
            if kind=="f": v="%e"%(20+round(random.random()*5,2))
            elif kind=="i": v=str(i*3+d)
            elif kind=="s": v=random.choice(["idle","run","stop"])
            elif kind=="b": v=random.choice(["true","false"])
            else: v=LABEL+str(i//100)
            out.write(json.dumps({"device":"dev-%d"%d,"sensor":s,"ts":ts,"value":v})+"\n")
  if r>=3: out.write(json.dumps({"device":"dev-1","sensor":"temp","ts":t0+(r-2)*30000+1,"value":"overwritten-%d"%r})+"\n")
